package k8s

import (
	"strings"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// testKubeletSharedConfig plays a tenant who copies team-a's checkpoint
// image's config and layers into a manifest of team-b's own checkpoint
// parts, in a public registry, and has a team-b pod pull it by tag. The
// two images share an image ID, and containerd records the tag (tags sort
// before digests) as the image of team-a's next container. team-b's pod is
// refused (its parts are not those its config names) and never runs;
// team-a's pod, which names its image by digest, restores team-a's
// checkpoint, not team-b's.
func testKubeletSharedConfig(c *k8sCluster, r *kubeletRun) {
	// Checkpointed late enough that its ticks cannot pass for team-a's.
	own := c.checkpointPodAt(r.reg, nsTeamB, "b-source", podOpts{}, r.reg.Addr+"/ckpt/b-source:v1", r.ck.after+20)
	borrowed := harness.CraftBorrowedConfig(c.t, r.pub.Addr+"/ckpt/borrowed", "v1", r.ck.ref, own.ref)

	c.RunPod(appPod(nsTeamB, "borrower", borrowed, podOpts{}))
	p := c.waitPodFor(nsTeamB, "borrower", "a refusal that names the checkpoint parts", func(p *k8sPod) (bool, bool) {
		_, msg := p.waiting()
		return strings.Contains(msg, "checkpoint parts") || p.everRan(), false
	})
	if p.everRan() {
		c.t.Fatalf("team-b's pod of a borrowed config ran: %s", c.whatRuns(nsTeamB, "borrower", own))
	}
	_, msg := p.waiting()
	c.t.Logf("team-b refused: %s", msg)
	if c.node.ImageID(borrowed) != c.node.ImageID(r.ck.ref) {
		c.t.Fatal("the borrowed image does not share team-a's image ID: this check would prove nothing")
	}

	c.RunPod(appPod(nsTeamA, "victim", r.ck.ref, r.tenant))
	c.waitPod(nsTeamA, "victim", "Running")
	if ctrs := c.criContainers(nsTeamA, "victim"); len(ctrs) != 1 || c.node.ContainerRecordImage(ctrs[0].Id) != borrowed {
		c.t.Fatalf("containerd did not record the borrowed tag as team-a's image (%v): this check would prove nothing", ctrs)
	}
	c.WaitTicks(nsTeamA, "victim", 3)
	ticks := c.logTicks(nsTeamA, "victim")
	if first := ticks[0]; first <= r.ck.before || first > r.ck.after+1 {
		c.t.Fatalf("team-a's pod began at tick %d; its checkpoint was after tick %d (team-b's after %d)", first, r.ck.before, own.before)
	}
	c.t.Logf("team-a restored: ticks %d…%d (its checkpoint after tick %d, team-b's after %d)", ticks[0], harness.LastOf(ticks), r.ck.before, own.before)
}
