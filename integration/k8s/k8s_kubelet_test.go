package k8s

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	nsTeamA    = "team-a" // the tenant: restricted (see tenantProfile)
	nsTeamB    = "team-b" // another tenant, without team-a's pull secret
	nsOps      = "ops"    // privileged
	pullSecret = "ckpt-pull"
	psaEnforce = "pod-security.kubernetes.io/enforce"
)

// k8sCheckpoint is a pod's checkpoint, pushed as an image.
type k8sCheckpoint struct {
	archive string // the kubelet's archive, on the node
	ref     string // the image, by digest
	before  int    // the app's last tick before the checkpoint
	after   int    // its last tick seen after it, while it ran on
}

// kubeletRun is what TestKubelet's parts share.
type kubeletRun struct {
	reg    *harness.PrivateRegistry
	pub    *harness.ImgRegistry // public: a tenant's own images
	tenant podOpts              // team-a's pods: restricted, with the pull secret
	ck     k8sCheckpoint
}

func TestKubelet(t *testing.T) {
	began := time.Now()
	c := startK8sCluster(t)
	t.Logf("cluster up in %s", time.Since(began).Round(time.Millisecond))
	pub := harness.StartRegistry(t)
	r := &kubeletRun{reg: harness.StartPrivateRegistry(t), pub: pub}
	c.app = pub.Addr + "/cryo/app:v1"
	c.node.PublishApp(c.app)
	level, uid := tenantProfile(t)
	r.tenant = podOpts{sec: restricted, uid: uid, pullSecret: pullSecret}
	c.namespace(nsTeamA, map[string]string{psaEnforce: level})
	c.namespace(nsTeamB, nil)
	c.namespace(nsOps, map[string]string{psaEnforce: "privileged"})
	c.kubectl("create", "secret", "docker-registry", pullSecret, "-n", nsTeamA, "--docker-server="+r.reg.Addr,
		"--docker-username="+harness.PrivateUser, "--docker-password="+harness.PrivatePassword)

	r.ck = c.checkpointPod(r.reg, nsTeamA, "source", podOpts{sec: restricted, uid: uid}, r.reg.Addr+"/ckpt/source:v1")
	for _, s := range []struct {
		name string
		run  func(*k8sCluster, *kubeletRun)
	}{
		{"Restore", testKubeletRestore},
		{"OtherNamespace", testKubeletOtherNamespace},
		{"PrivilegedIntoRestricted", testKubeletPrivilegedIntoRestricted},
		{"SharedConfig", testKubeletSharedConfig},
	} {
		t.Run(s.name, func(t *testing.T) {
			start := time.Now()
			s.run(c.With(t), r)
			t.Logf("%s took %s", s.name, time.Since(start).Round(time.Millisecond))
		})
	}
	t.Logf("took %s", time.Since(began).Round(time.Millisecond))
}

// tenantProfile is the Pod Security level team-a enforces and the uid of
// its pods: restricted and 1000. Where root lacks CAP_SYS_RESOURCE (some
// VMs, this project's development VM among them), CRIU cannot read the
// rlimits of another user's process and so cannot dump a pod of uid 1000
// at all; there team-a enforces baseline, and its pods run as uid 0 with
// the rest of the restricted settings (no capabilities, no_new_privs,
// RuntimeDefault seccomp).
func tenantProfile(t *testing.T) (string, int64) {
	if capBounded(24) { // CAP_SYS_RESOURCE
		return "restricted", 1000
	}
	t.Log("root lacks CAP_SYS_RESOURCE here: CRIU cannot dump a process of another uid, so team-a enforces baseline and its pods run as uid 0 with restricted's other settings")
	return "baseline", 0
}

// capBounded reports whether capability bit is in this process's
// bounding set.
func capBounded(bit uint) bool {
	data, _ := os.ReadFile("/proc/self/status")
	v, _ := strconv.ParseUint(statusFields(string(data))["CapBnd"], 16, 64)
	return v&(1<<bit) != 0
}

// checkpointPod runs the app in pod ns/name, checkpoints it through the
// kubelet's API (after checking that the API wants a client certificate),
// removes the pod, and builds and pushes the runnable checkpoint image as
// tag.
func (c *k8sCluster) checkpointPod(reg *harness.PrivateRegistry, ns, name string, o podOpts, tag string) k8sCheckpoint {
	c.t.Helper()
	return c.checkpointPodAt(reg, ns, name, o, tag, 3)
}

// checkpointPodAt is checkpointPod once the app has printed ticks ticks.
func (c *k8sCluster) checkpointPodAt(reg *harness.PrivateRegistry, ns, name string, o podOpts, tag string, ticks int) k8sCheckpoint {
	c.t.Helper()
	c.RunPod(appPod(ns, name, c.app, o))
	c.waitPod(ns, name, "Running")
	c.WaitTicks(ns, name, ticks)
	api := "/checkpoint/" + ns + "/" + name + "/app"
	if code, body := c.kubeletPost("", api); code != http.StatusUnauthorized {
		c.t.Fatalf("kubelet %s without a client certificate: %d %s, want 401", api, code, body)
	}
	ck := k8sCheckpoint{before: harness.LastOf(c.logTicks(ns, name))}
	took := time.Now()
	ck.archive = c.Checkpoint(ns, name, "app")
	c.t.Logf("kubelet checkpoint of %s/%s: %s in %s", ns, name, ck.archive, time.Since(took).Round(time.Millisecond))
	if !strings.HasPrefix(ck.archive, filepath.Join(c.dir, "kubelet", "checkpoints")+"/") {
		c.t.Errorf("archive %s is outside the kubelet's checkpoints directory", ck.archive)
	}
	c.WaitTicks(ns, name, 2) // the checkpoint leaves the pod running
	ck.after = harness.LastOf(c.logTicks(ns, name))
	c.kubectl("delete", "pod", "-n", ns, name, "--wait=false")

	builder := harness.NewNode(c.t, nil)
	harness.WantIn(c.t, builder.Cryo(c.t, "image", "build", "--runnable", ck.archive, tag), "built "+tag)
	auth := reg.AuthFile(c.t, c.t.TempDir(), harness.PrivatePassword)
	ck.ref = byDigest(tag, builder.Cryo(c.t, "image", "push", "--authfile", auth, tag))
	return ck
}

// testKubeletRestore: a restricted pod in team-a whose container's image
// is the checkpoint (pulled with the pod's secret) runs, continues the
// app's ticks from the checkpoint, and runs confined to its own spec: its
// uid, no capabilities, no_new_privs, seccomp filtering.
func testKubeletRestore(c *k8sCluster, r *kubeletRun) {
	c.RunPod(appPod(nsTeamA, "restored", r.ck.ref, r.tenant))
	c.waitPod(nsTeamA, "restored", "Running")
	c.WaitTicks(nsTeamA, "restored", 3)
	ticks := c.logTicks(nsTeamA, "restored")
	if ticks[0] <= r.ck.before || ticks[0] > r.ck.after+1 {
		c.t.Fatalf("restored pod's first tick %d; want one after %d (the checkpoint), at most %d", ticks[0], r.ck.before, r.ck.after+1)
	}
	c.t.Logf("restored: ticks %d…%d (checkpoint after tick %d)", ticks[0], harness.LastOf(ticks), r.ck.before)
	st := statusFields(c.kubectl("exec", "-n", nsTeamA, "restored", "--", "/bin/cat", "/proc/1/status"))
	ids := fmt.Sprintf("%[1]d %[1]d %[1]d %[1]d", r.tenant.uid)
	want := map[string]string{"Uid": ids, "Gid": ids, "CapEff": "0000000000000000",
		"CapPrm": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
	for k, v := range want {
		if st[k] != v {
			c.t.Errorf("restored process: %s = %q, want %q", k, st[k], v)
		}
	}
}

// testKubeletOtherNamespace plays the other tenant: the checkpoint image
// is on the node (team-a's pod pulled it), and a pod of team-b names it by
// digest, without team-a's pull secret. The kubelet must not hand it the
// image: the pod stays in ErrImagePull/ImagePullBackOff, and CRI never
// creates its container.
func testKubeletOtherNamespace(c *k8sCluster, r *kubeletRun) {
	if !c.node.ImageKnown(r.ck.ref) {
		c.t.Fatalf("%s is not on the node (team-a's restore did not pull it): this check would prove nothing", r.ck.ref)
	}
	c.RunPod(appPod(nsTeamB, "borrowed", r.ck.ref, podOpts{}))
	p := c.waitPodFor(nsTeamB, "borrowed", "image pull refusal", func(p *k8sPod) (bool, bool) {
		reason, _ := p.waiting()
		return reason == "ErrImagePull" || reason == "ImagePullBackOff", p.everRan()
	})
	_, msg := p.waiting()
	c.t.Logf("team-b's pod: %s", msg)
	time.Sleep(5 * time.Second) // a later retry must not run it either
	if p := c.pod(nsTeamB, "borrowed"); p.everRan() || p.Status.Phase != "Pending" {
		c.t.Fatalf("team-b's pod without the pull secret ran (phase %s)", p.Status.Phase)
	}
	if got := c.criContainers(nsTeamB, "borrowed"); len(got) != 0 {
		c.t.Fatalf("CRI created %d container(s) for team-b's pod: %v", len(got), got)
	}
}

// testKubeletPrivilegedIntoRestricted: team-a's namespace refuses a
// privileged pod outright; a checkpoint of a privileged pod of ops, named
// by a restricted pod of team-a, is refused by the runtime (the pod's
// status and events say "confine") and never runs.
func testKubeletPrivilegedIntoRestricted(c *k8sCluster, r *kubeletRun) {
	direct := appPod(nsTeamA, "direct", c.app, podOpts{sec: privileged})
	if out, err := c.apply(direct); err == nil || !strings.Contains(out, "violates PodSecurity") {
		c.t.Fatalf("team-a admitted a privileged pod (%v):\n%s", err, out)
	}
	ck := c.checkpointPod(r.reg, nsOps, "root-source", podOpts{sec: privileged}, r.reg.Addr+"/ckpt/privileged:v1")
	c.RunPod(appPod(nsTeamA, "from-privileged", ck.ref, r.tenant))
	p := c.waitPodFor(nsTeamA, "from-privileged", `a refusal that says "confine"`, func(p *k8sPod) (bool, bool) {
		_, msg := p.waiting()
		return strings.Contains(msg, "confine") || p.everRan(), false
	})
	if p.everRan() {
		c.t.Fatalf("team-a runs the privileged pod's checkpoint: %s", c.whatRuns(nsTeamA, "from-privileged", ck))
	}
	_, msg := p.waiting()
	c.t.Logf("refused: %s", msg)
	if ev := c.events(nsTeamA, "from-privileged"); !strings.Contains(ev, "confine") {
		c.t.Errorf("the pod's events do not say confine:\n%s", ev)
	}
	for _, ctr := range c.criContainers(nsTeamA, "from-privileged") {
		if ctr.State == criapi.ContainerState_CONTAINER_RUNNING {
			c.t.Fatalf("CRI runs the privileged checkpoint's container %s in team-a", ctr.Id)
		}
	}
}

// whatRuns tells whether a pod that should not run was restored from
// checkpoint ck (its first tick follows the checkpoint's) or started
// fresh, and with which rights, for a failure.
func (c *k8sCluster) whatRuns(ns, pod string, ck k8sCheckpoint) string {
	c.t.Helper()
	c.WaitTicks(ns, pod, 1)
	ticks := c.logTicks(ns, pod)
	how := fmt.Sprintf("started fresh (first tick %d; the checkpoint was after tick %d)", ticks[0], ck.before)
	if ticks[0] > ck.before {
		how = fmt.Sprintf("restored (first tick %d follows the checkpoint's %d)", ticks[0], ck.before)
	}
	out, err := c.kubectlErr("exec", "-n", ns, pod, "--", "/bin/cat", "/proc/1/status")
	if err != nil {
		return how + "; its /proc/1/status: " + err.Error()
	}
	st := statusFields(out)
	return fmt.Sprintf("%s, with Uid %s, CapEff %s, NoNewPrivs %s, Seccomp %s", how, st["Uid"], st["CapEff"], st["NoNewPrivs"], st["Seccomp"])
}

// byDigest is tag's repository pinned to the digest that `cryo image push`
// printed last, as a pod names a checkpoint.
func byDigest(tag, pushed string) string {
	pushed = strings.TrimSpace(pushed)
	repo := tag[:strings.LastIndex(tag, ":")]
	return repo + "@" + pushed[strings.LastIndex(pushed, "\n")+1:]
}

// statusFields parses a /proc/<pid>/status: each field's value with its
// blanks squeezed.
func statusFields(data string) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(data, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return fields
}
