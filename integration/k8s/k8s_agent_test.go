package k8s

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/integration/harness"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	nsAgentApps  = "apps"
	nsAgentOther = "other"
	agentSecret  = "ckpt-push"
)

func TestK8sAgent(t *testing.T) {
	began := time.Now()
	helm := requireHelm(t)
	c := startK8sCluster(t)
	t.Logf("cluster up in %s", time.Since(began).Round(time.Millisecond))
	pub, reg := harness.StartRegistry(t), harness.StartPrivateRegistry(t)
	c.app = pub.Addr + "/cryo/app:v1"
	c.node.PublishApp(c.app)
	c.installCRD()
	c.startCryoController()
	c.installAgentRBAC(helm)
	// The node as the installer leaves it: the RuntimeClass's scheduling
	// may ask for the label.
	c.kubectl("label", "node", k8sNodeName, "cryo.io/runtime=ready")
	c.namespace(nsAgentApps, nil)
	c.namespace(nsAgentOther, nil)
	c.kubectl("create", "secret", "docker-registry", agentSecret, "-n", nsAgentApps, "--docker-server="+reg.Addr,
		"--docker-username="+harness.PrivateUser, "--docker-password="+harness.PrivatePassword)
	agent := c.startAgent(t, harness.CryoBin(t, "cryo-k8s"))

	c.RunPod(appPod(nsAgentApps, "source", c.app, podOpts{pullSecret: agentSecret}))
	c.waitPod(nsAgentApps, "source", "Running")
	c.WaitTicks(nsAgentApps, "source", 3)
	repo := reg.Addr + "/ckpt/source"
	took := time.Now()
	waitPlugin := c.startPlugin("checkpoint", "source", "--to", repo, "--secret", agentSecret, "--wait", "-n", nsAgentApps, "--name", "first")
	harness.WaitFor(t, 30*time.Second, "the Checkpoint first", func() bool {
		_, err := c.kubectlErr("get", "checkpoint", "first", "-n", nsAgentApps)
		return err == nil
	})
	// The ticks printed before the controller could assign it.
	before := harness.LastOf(c.logTicks(nsAgentApps, "source"))
	cp, seen := c.waitCheckpoint(nsAgentApps, "first")
	t.Logf("Checkpoint first: %v in %s", seen, time.Since(took).Round(time.Millisecond))
	out, err := waitPlugin()
	if err != nil || cp.Status.Phase != cryov1.PhaseSucceeded {
		t.Fatalf("kubectl cryo checkpoint --wait: %v (phase %s, failure %+v)\n%s\n%s", err, cp.Status.Phase, cp.Status.Failure, out, c.agentTail())
	}
	harness.WantIn(t, out, "first: Succeeded 100%", "image "+repo+"@sha256:", "kubelet-checkpoint", "push")
	checkSucceeded(t, cp, repo)
	after := harness.LastOf(c.logTicks(nsAgentApps, "source"))
	c.checkNoLeftovers(agent, nsAgentApps, "source")

	for _, s := range []struct {
		name string
		run  func(*k8sCluster)
	}{
		{"Replicas", func(c *k8sCluster) { testAgentReplicas(c, cp.Status.Image, before, after) }},
		{"OtherNamespace", func(c *k8sCluster) { testAgentOtherNamespace(c, cp.Status.Image) }},
		{"Plugin", testAgentPlugin},
		{"LeaveRunningFalse", func(c *k8sCluster) { testAgentLeaveRunningFalse(c, repo) }},
		{"KilledMidCheckpoint", func(c *k8sCluster) { agent = testAgentKilled(c, t, agent, repo) }},
		{"PodDeleted", func(c *k8sCluster) { agent = testAgentPodDeleted(c, t, agent, repo) }},
		{"Cleanup", func(c *k8sCluster) { testAgentCleanup(c, reg, cp.Status.Image) }},
	} {
		t.Run(s.name, func(t *testing.T) {
			start := time.Now()
			s.run(c.With(t))
			t.Logf("%s took %s", s.name, time.Since(start).Round(time.Millisecond))
		})
	}
	t.Logf("took %s", time.Since(began).Round(time.Millisecond))
}

// checkSucceeded checks what the agent recorded of a Checkpoint.
func checkSucceeded(t *testing.T, cp *cryov1.Checkpoint, repo string) {
	t.Helper()
	st := cp.Status
	if !strings.HasPrefix(st.Image, repo+"@sha256:") || st.ImageSize <= 0 || st.Progress != 100 || st.CryoVersion == "" {
		t.Errorf("status: image %q size %d progress %d cryo %q", st.Image, st.ImageSize, st.Progress, st.CryoVersion)
	}
	if st.BytesTotal != st.ImageSize || st.BytesDone != st.BytesTotal {
		t.Errorf("status: bytes %d of %d, want the push's %d of %d", st.BytesDone, st.BytesTotal, st.ImageSize, st.ImageSize)
	}
	steps := map[string]time.Duration{}
	for _, s := range st.StepTimings {
		steps[s.Step] = s.Duration.Duration
	}
	for _, want := range []string{"kubelet-checkpoint", "build", "push"} {
		if steps[want] <= 0 {
			t.Errorf("no timing of step %s in %v", want, st.StepTimings)
		}
	}
	shim := 0
	for name := range steps {
		if strings.HasPrefix(name, "shim/") {
			shim++
		}
	}
	if shim == 0 {
		t.Errorf("no step of cryo's shim (shim/…, from the checkpoint's manifest) in %v", st.StepTimings)
	}
	t.Logf("image %s, %d bytes, steps %v", st.Image, st.ImageSize, st.StepTimings)
}

// checkNoLeftovers: no kubelet archive of the pod, no work directory.
func (c *k8sCluster) checkNoLeftovers(a *k8sAgent, ns, pod string) {
	c.t.Helper()
	if left := c.archives(ns, pod); len(left) != 0 {
		c.t.Errorf("the kubelet's archives are left: %v", left)
	}
	if ents, _ := os.ReadDir(a.work); len(ents) != 0 {
		c.t.Errorf("the agent's work directory holds %d entries", len(ents))
	}
}

// testAgentReplicas: two new pods of the source's spec with the
// annotation cryo.io/restore-from: first (what a scaled Deployment's
// template gives its new replicas; TestK8sDeployment scales a real one)
// are started by cryo's pod webhook from the checkpoint image, and each
// carries on the source's counter from the checkpoint.
func testAgentReplicas(c *k8sCluster, image string, before, after int) {
	for _, name := range []string{"replica-1", "replica-2"} {
		pod := appPod(nsAgentApps, name, c.app, podOpts{pullSecret: agentSecret})
		pod["metadata"].(map[string]any)["annotations"] = map[string]string{cryov1.RestoreFromAnnotation: "first"}
		c.RunPod(pod)
		got := c.kubectl("get", "pod", name, "-n", nsAgentApps, "-o", "jsonpath={.spec.containers[0].image}")
		if got != image {
			c.t.Fatalf("the pod webhook did not start %s from %s: its image is %s\n%s", name, image, got, c.events(nsAgentApps, name))
		}
	}
	for _, name := range []string{"replica-1", "replica-2"} {
		c.waitPod(nsAgentApps, name, "Running")
		c.WaitTicks(nsAgentApps, name, 3)
		ticks := c.logTicks(nsAgentApps, name)
		if ticks[0] <= before || ticks[0] > after+1 {
			c.t.Errorf("%s began at tick %d; the checkpoint was taken between ticks %d and %d", name, ticks[0], before, after)
		}
		c.t.Logf("%s: ticks %d…%d (checkpoint between %d and %d)", name, ticks[0], harness.LastOf(ticks), before, after)
	}
}

// testAgentLeaveRunningFalse: a second pod, checkpointed as a preempted
// job would be (--leave-running=false), is deleted once its image is
// pushed and recorded, with a condition and an Event that say so.
func testAgentLeaveRunningFalse(c *k8sCluster, repo string) {
	c.RunPod(appPod(nsAgentApps, "preempted", c.app, podOpts{pullSecret: agentSecret}))
	c.waitPod(nsAgentApps, "preempted", "Running")
	c.WaitTicks(nsAgentApps, "preempted", 2)
	out := c.plugin("checkpoint", "preempted", "--to", repo, "--secret", agentSecret, "--leave-running=false", "--wait", "-n", nsAgentApps, "--name", "preempted")
	harness.WantIn(c.t, out, "preempted: Succeeded 100%", "image "+repo+"@sha256:")
	cp := c.checkpointObj(nsAgentApps, "preempted")
	checkSucceeded(c.t, cp, repo)
	harness.WaitFor(c.t, k8sWait, "the source pod deleted", func() bool {
		_, err := c.kubectlErr("get", "pod", "preempted", "-n", nsAgentApps)
		return err != nil
	})
	cp = c.checkpointObj(nsAgentApps, "preempted")
	cond := meta.FindStatusCondition(cp.Status.Conditions, cryov1.ConditionSourceDeleted)
	if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, cp.Status.Image) {
		c.t.Errorf("condition SourceDeleted: %+v", cond)
	}
	if ev := c.events(nsAgentApps, "preempted"); !strings.Contains(ev, "SourceDeleted: pod preempted was deleted") {
		c.t.Errorf("no SourceDeleted Event on the Checkpoint:\n%s", ev)
	}
	c.t.Logf("deleted after the push: %s", cond.Message)
}

// testAgentOtherNamespace: a pod of a namespace without the pull secret
// stays in ErrImagePull, though the image is on the node.
func testAgentOtherNamespace(c *k8sCluster, image string) {
	c.RunPod(appPod(nsAgentOther, "borrowed", image, podOpts{}))
	p := c.waitPodFor(nsAgentOther, "borrowed", "image pull refusal", func(p *k8sPod) (bool, bool) {
		reason, _ := p.waiting()
		return reason == "ErrImagePull" || reason == "ImagePullBackOff", p.everRan()
	})
	_, msg := p.waiting()
	c.t.Logf("the other namespace's pod: %s", msg)
}

// testAgentPlugin: kubectl cryo ls lists the Checkpoint, and restore-from
// annotates a Deployment's pod template.
func testAgentPlugin(c *k8sCluster) {
	harness.WantIn(c.t, c.plugin("ls", "-n", nsAgentApps), "first", "Succeeded", "100%")
	if l := c.pluginList(nsAgentApps); len(l) != 1 || l[0].Name != "first" || l[0].Status.Image == "" {
		c.t.Errorf("kubectl cryo ls --json: %+v", l)
	}
	dep := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "app", "namespace": nsAgentApps},
		"spec": map[string]any{"replicas": 1, "selector": map[string]any{"matchLabels": map[string]string{"app": "app"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "app"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": c.app}}}}}}
	if out, err := c.apply(dep); err != nil {
		c.t.Fatalf("create the Deployment: %v\n%s", err, out)
	}
	harness.WantIn(c.t, c.plugin("restore-from", "first", "deployment/app", "-n", nsAgentApps), "new pods restore from first")
	got := c.kubectl("get", "deployment", "app", "-n", nsAgentApps, "-o", `jsonpath={.spec.template.metadata.annotations.cryo\.io/restore-from}`)
	if got != "first" {
		c.t.Errorf("the template's restore-from annotation is %q", got)
	}
	if out, err := harness.RunErr(time.Minute, nil, harness.CryoBin(c.t, "kubectl-cryo"), "--kubeconfig", c.kubeconfig, "restore-from", "nosuch", "deployment/app", "-n", nsAgentApps); err == nil {
		c.t.Errorf("restore-from of a missing Checkpoint succeeded:\n%s", out)
	}
}

// testAgentKilled: an agent SIGKILLed while it pushes leaves the
// Checkpoint Pushing; the agent started again fails it (AgentRestarted),
// removes the archive and its work, and the source pod runs on.
func testAgentKilled(c *k8sCluster, life testing.TB, a *k8sAgent, repo string) *k8sAgent {
	a.proc.Stop()
	hold := filepath.Join(c.t.TempDir(), "hold")
	held := c.startAgent(c.t, harness.FailpointBin(c.t, "cryo-k8s"), "CRYO_TEST_HOLD=agent-push:"+hold)
	c.plugin("checkpoint", "source", "--to", repo, "--secret", agentSecret, "-n", nsAgentApps, "--name", "second")
	harness.WaitFor(c.t, k8sWait, "the agent held before its push", func() bool { _, err := os.Stat(hold); return err == nil })
	if cp := c.checkpointObj(nsAgentApps, "second"); cp.Status.Phase != cryov1.PhasePushing {
		c.t.Fatalf("held before the push, the Checkpoint is %s", cp.Status.Phase)
	}
	if len(c.archives(nsAgentApps, "source")) == 0 {
		c.t.Fatal("no kubelet archive while the agent is held: this check would prove nothing")
	}
	held.Kill(c.t)
	ticks := harness.LastOf(c.logTicks(nsAgentApps, "source"))
	a = c.startAgent(life, harness.CryoBin(c.t, "cryo-k8s"))
	cp, seen := c.waitCheckpoint(nsAgentApps, "second")
	if cp.Status.Phase != cryov1.PhaseFailed || cp.Status.Failure == nil || !strings.HasPrefix(cp.Status.Failure.Cause, "AgentRestarted") {
		c.t.Fatalf("after the agent's kill: %v, failure %+v", seen, cp.Status.Failure)
	}
	c.t.Logf("failed: %+v", *cp.Status.Failure)
	c.checkNoLeftovers(a, nsAgentApps, "source")
	c.WaitTicks(nsAgentApps, "source", 2)
	if p := c.pod(nsAgentApps, "source"); p.Status.Phase != "Running" || harness.LastOf(c.logTicks(nsAgentApps, "source")) <= ticks {
		c.t.Errorf("the source pod does not run on (phase %s)", p.Status.Phase)
	}
	return a
}

// testAgentCleanup: deleting a Checkpoint runs the agent's side of the
// cleanup finalizer: its manifest leaves the registry, then the object.
func testAgentCleanup(c *k8sCluster, reg *harness.PrivateRegistry, image string) {
	if out, err := c.kubectlErr("delete", "checkpoint", "first", "-n", nsAgentApps, "--timeout=30s"); err != nil {
		c.t.Fatalf("delete the Checkpoint: %v\n%s\n%s", err, out, c.agentTail())
	}
	repo, digest, _ := strings.Cut(image, "@")
	name := strings.TrimPrefix(repo, reg.Addr+"/")
	req, _ := http.NewRequest(http.MethodHead, "http://"+reg.Addr+"/v2/"+name+"/manifests/"+digest, nil)
	req.SetBasicAuth(harness.PrivateUser, harness.PrivatePassword)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		c.t.Errorf("the deleted Checkpoint's manifest answers %s, want 404", resp.Status)
	}
}

// testAgentPodDeleted: a pod deleted while the agent is about to call the
// kubelet ends its Checkpoint Failed, with the step and the kubelet's
// cause, and leaves nothing on the node.
func testAgentPodDeleted(c *k8sCluster, life testing.TB, a *k8sAgent, repo string) *k8sAgent {
	c.RunPod(appPod(nsAgentApps, "doomed", c.app, podOpts{pullSecret: agentSecret}))
	c.waitPod(nsAgentApps, "doomed", "Running")
	a.proc.Stop()
	hold := filepath.Join(c.t.TempDir(), "hold")
	held := c.startAgent(c.t, harness.FailpointBin(c.t, "cryo-k8s"), "CRYO_TEST_HOLD=agent-kubelet-checkpoint:"+hold)
	c.plugin("checkpoint", "doomed", "--to", repo, "--secret", agentSecret, "-n", nsAgentApps, "--name", "third")
	harness.WaitFor(c.t, k8sWait, "the agent held before the kubelet's checkpoint", func() bool { _, err := os.Stat(hold); return err == nil })
	c.kubectl("delete", "pod", "doomed", "-n", nsAgentApps, "--grace-period=1", "--wait=true", "--timeout=60s")
	if err := os.Remove(hold); err != nil {
		c.t.Fatal(err)
	}
	cp, seen := c.waitCheckpoint(nsAgentApps, "third")
	if cp.Status.Phase != cryov1.PhaseFailed || cp.Status.Failure == nil {
		c.t.Fatalf("a Checkpoint of a deleted pod: %v, failure %+v", seen, cp.Status.Failure)
	}
	c.t.Logf("failed: %+v", *cp.Status.Failure)
	held.proc.Stop()
	a = c.startAgent(life, harness.CryoBin(c.t, "cryo-k8s"))
	c.checkNoLeftovers(a, nsAgentApps, "doomed")
	return a
}
