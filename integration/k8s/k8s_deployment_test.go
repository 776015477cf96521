package k8s

import (
	"net/url"
	"strings"
	"testing"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/k8s/controller/admission"
)

const (
	nsDeploy   = "deploy"
	deployName = "counter"
	deployCkpt = "counter" // the Checkpoint the template names
)

// deployPod is the part of a Deployment's pod the test reads.
type deployPod struct {
	Metadata struct {
		Name              string
		Annotations       map[string]string
		OwnerReferences   []struct{ Kind, Name string }
		DeletionTimestamp *time.Time
	}
	Spec struct {
		NodeName   string
		Containers []struct{ Image string }
	}
	Status struct{ Phase string }
}

func (p *deployPod) owner() string {
	for _, o := range p.Metadata.OwnerReferences {
		if o.Kind == "ReplicaSet" {
			return o.Name
		}
	}
	return ""
}

// deployTest is the cluster with its controllers, and the Deployment's
// state as the steps leave it.
type deployTest struct {
	*k8sCluster
	cryo          *apiCluster
	kcm, sched    *k8sProc
	known         map[string]bool // the pods seen so far
	source        string          // the pod the Checkpoint is of
	cp            *cryov1.Checkpoint
	before, after int // the source's last ticks before and after its checkpoint
}

func TestK8sDeployment(t *testing.T) {
	began := time.Now()
	helm := requireHelm(t)
	requireK8sControllers(t)
	c := startK8sCluster(t)
	d := &deployTest{k8sCluster: c, known: map[string]bool{}}
	d.kcm, d.sched = c.startWorkloadControllers()
	t.Logf("cluster with controller manager and scheduler up in %s", time.Since(began).Round(time.Millisecond))
	pub, reg := harness.StartRegistry(t), harness.StartPrivateRegistry(t)
	c.app = pub.Addr + "/cryo/app:v1"
	c.node.PublishApp(c.app)
	c.installCRD()
	d.cryo = c.startCryoController()
	c.installAgentRBAC(helm)
	c.kubectl("label", "node", k8sNodeName, "cryo.io/runtime=ready")
	c.namespace(nsDeploy, nil)
	c.kubectl("create", "secret", "docker-registry", agentSecret, "-n", nsDeploy, "--docker-server="+reg.Addr,
		"--docker-username="+harness.PrivateUser, "--docker-password="+harness.PrivatePassword)
	c.startAgent(t, harness.CryoBin(t, "cryo-k8s"))

	for _, s := range []struct {
		name string
		run  func(*deployTest)
	}{
		{"ColdFirst", testDeployColdFirst},
		{"Checkpoint", func(d *deployTest) { testDeployCheckpoint(d, reg.Addr+"/ckpt/"+deployName) }},
		{"ScaleRestores", testDeployScaleRestores},
		{"WebhookDown", testDeployWebhookDown},
		{"EnvChanged", testDeployEnvChanged},
	} {
		ok := t.Run(s.name, func(t *testing.T) {
			start := time.Now()
			d.k8sCluster = c.With(t)
			defer func() { d.k8sCluster = c }()
			s.run(d)
			t.Logf("%s took %s", s.name, time.Since(start).Round(time.Millisecond))
		})
		if !ok {
			break // each step starts where the one before left the Deployment
		}
	}
	t.Logf("took %s", time.Since(began).Round(time.Millisecond))
}

// counterDeployment is the agent test's counter pod as a Deployment's
// template, naming Checkpoint deployCkpt: the scheduler binds its pods,
// and it restarts them as a Deployment must.
func counterDeployment(image string) map[string]any {
	pod := appPod(nsDeploy, "", image, podOpts{pullSecret: agentSecret})
	spec := pod["spec"].(map[string]any)
	delete(spec, "nodeName")
	spec["restartPolicy"] = "Always"
	ctr := spec["containers"].([]any)[0].(map[string]any)
	ctr["env"] = []any{map[string]string{"name": "MODE", "value": "v1"}}
	labels := map[string]string{"app": deployName}
	return map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": deployName, "namespace": nsDeploy},
		"spec": map[string]any{"replicas": 1, "selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels, "annotations": map[string]string{cryov1.RestoreFromAnnotation: deployCkpt}},
				"spec":     spec}}}
}

// testDeployColdFirst: the first replica starts cold, since the Checkpoint
// it names does not exist yet, and the webhook says so on its ReplicaSet.
func testDeployColdFirst(d *deployTest) {
	start := time.Now()
	if out, err := d.apply(counterDeployment(d.app)); err != nil {
		d.t.Fatalf("create the Deployment: %v\n%s", err, out)
	}
	p := d.waitNew(1, "the first replica")[0]
	d.t.Logf("the first replica %s runs after %s", p.Metadata.Name, time.Since(start).Round(time.Millisecond))
	d.checkCold(p, "no Checkpoint "+deployCkpt+" in namespace "+nsDeploy)
	d.source = p.Metadata.Name
}

// testDeployCheckpoint: a Checkpoint of the replica succeeds, with the
// image's digest, its size and the steps' timings, and the replica runs on.
func testDeployCheckpoint(d *deployTest, repo string) {
	d.WaitTicks(nsDeploy, d.source, 3)
	took := time.Now()
	wait := d.startPlugin("checkpoint", d.source, "--to", repo, "--secret", agentSecret, "--wait", "-n", nsDeploy, "--name", deployCkpt)
	harness.WaitFor(d.t, 30*time.Second, "the Checkpoint "+deployCkpt, func() bool {
		_, err := d.kubectlErr("get", "checkpoint", deployCkpt, "-n", nsDeploy)
		return err == nil
	})
	d.before = harness.LastOf(d.logTicks(nsDeploy, d.source))
	cp, seen := d.waitCheckpoint(nsDeploy, deployCkpt)
	d.t.Logf("Checkpoint %s: %v in %s", deployCkpt, seen, time.Since(took).Round(time.Millisecond))
	out, err := wait()
	if err != nil || cp.Status.Phase != cryov1.PhaseSucceeded {
		d.t.Fatalf("kubectl cryo checkpoint --wait: %v (phase %s, failure %+v)\n%s\n%s", err, cp.Status.Phase, cp.Status.Failure, out, d.agentTail())
	}
	checkSucceeded(d.t, cp, repo)
	d.after = harness.LastOf(d.logTicks(nsDeploy, d.source))
	d.cp = cp
}

// testDeployScaleRestores: scaled to 3, the two new replicas start from
// the checkpoint image, marked restored-from by the webhook with no cold
// start Event, and each carries on the counter from the checkpoint's
// value while the checkpointed replica runs on.
func testDeployScaleRestores(d *deployTest) {
	rs, restoring := d.countEvents(admission.ReasonColdStart), d.countEvents(admission.ReasonRestoring)
	start := time.Now()
	d.kubectl("scale", "deployment/"+deployName, "-n", nsDeploy, "--replicas=3")
	pods := d.waitNew(2, "two restored replicas")
	d.t.Logf("two restored replicas run %s after the scale", time.Since(start).Round(time.Millisecond))
	for _, p := range pods {
		name := p.Metadata.Name
		if got := p.Spec.Containers[0].Image; got != d.cp.Status.Image {
			d.t.Fatalf("the pod webhook did not start %s from %s: its image is %s\n%s", name, d.cp.Status.Image, got, d.events(nsDeploy, p.owner()))
		}
		if got := p.Metadata.Annotations[cryov1.RestoredFromAnnotation]; got != deployCkpt {
			d.t.Errorf("%s: annotation %s is %q, want %s", name, cryov1.RestoredFromAnnotation, got, deployCkpt)
		}
		d.WaitTicks(nsDeploy, name, 3)
		ticks := d.logTicks(nsDeploy, name)
		if ticks[0] <= d.before || ticks[0] > d.after+1 {
			d.t.Errorf("%s began at tick %d; the checkpoint was taken between ticks %d and %d", name, ticks[0], d.before, d.after)
		}
		d.t.Logf("%s: ticks %d…%d (checkpoint between %d and %d)", name, ticks[0], harness.LastOf(ticks), d.before, d.after)
	}
	if n := harness.LastOf(d.logTicks(nsDeploy, d.source)); n <= d.after {
		d.t.Errorf("the checkpointed replica stopped at tick %d", n)
	}
	if ready := d.kubectl("get", "deployment/"+deployName, "-n", nsDeploy, "-o", "jsonpath={.status.readyReplicas}"); ready != "3" {
		d.t.Errorf("the Deployment has %s ready replicas, want 3", ready)
	}
	if now := d.countEvents(admission.ReasonColdStart); now != rs {
		d.t.Errorf("the scale-up recorded %d cold start Events (before it %d, for the first replica)", now-rs, rs)
	}
	if now := d.countEvents(admission.ReasonRestoring); now-restoring != 2 {
		d.t.Errorf("the scale-up recorded %d %s Events, want one for each of the 2 new replicas\n%s", now-restoring, admission.ReasonRestoring, d.diagnosis())
	}
}

// countEvents counts the webhook's Events of reason in the namespace.
func (d *deployTest) countEvents(reason string) int {
	d.t.Helper()
	var list struct{ Items []struct{ Reason string } }
	if err := d.getJSON("/api/v1/namespaces/"+nsDeploy+"/events", &list); err != nil {
		d.t.Fatalf("events of %s: %v", nsDeploy, err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Reason == reason {
			n++
		}
	}
	return n
}

// testDeployWebhookDown: with cryo's webhook down (its failure policy is
// Ignore), the Deployment still scales, and the new replica starts cold
// from the template's own image, unmarked.
func testDeployWebhookDown(d *deployTest) {
	d.cryo.stopController()
	start := time.Now()
	d.kubectl("scale", "deployment/"+deployName, "-n", nsDeploy, "--replicas=4")
	p := d.waitNew(1, "a replica with the webhook down")[0]
	d.t.Logf("the replica %s runs %s after the scale", p.Metadata.Name, time.Since(start).Round(time.Millisecond))
	if got := p.Spec.Containers[0].Image; got != d.app {
		d.t.Errorf("with the webhook down, %s runs image %s, want the template's %s", p.Metadata.Name, got, d.app)
	}
	for _, a := range []string{cryov1.RestoredFromAnnotation, cryov1.ColdStartAnnotation} {
		if v, ok := p.Metadata.Annotations[a]; ok {
			d.t.Errorf("with the webhook down, %s has annotation %s=%q", p.Metadata.Name, a, v)
		}
	}
	d.checkTicksFromOne(p.Metadata.Name)
	d.cryo.startController()
}

// testDeployEnvChanged: an env variable of the template changed, the
// rollout's new pods no longer match the checkpoint's compatibility key:
// each starts cold, with the reason on the pod and the webhook's Event on
// the new ReplicaSet.
func testDeployEnvChanged(d *deployTest) {
	start := time.Now()
	d.kubectl("set", "env", "deployment/"+deployName, "-n", nsDeploy, "MODE=v2")
	if out, err := d.kubectlErr("rollout", "status", "deployment/"+deployName, "-n", nsDeploy, "--timeout=3m"); err != nil {
		d.t.Fatalf("rollout: %v\n%s\n%s", err, out, d.diagnosis())
	}
	pods := d.waitNew(4, "the rollout's replicas")
	d.t.Logf("the rollout's 4 replicas run %s after the change", time.Since(start).Round(time.Millisecond))
	for _, p := range pods {
		d.checkCold(p, "differs from the one Checkpoint "+deployCkpt+" was taken of")
	}
}

// checkCold checks that p starts cold from the template's image, with
// why in its cold-start annotation and in the Event on its ReplicaSet,
// and that its counter starts from 1.
func (d *deployTest) checkCold(p deployPod, why string) {
	d.t.Helper()
	name := p.Metadata.Name
	if got := p.Spec.Containers[0].Image; got != d.app {
		d.t.Errorf("%s runs image %s, want the template's %s", name, got, d.app)
	}
	if got := p.Metadata.Annotations[cryov1.ColdStartAnnotation]; !strings.Contains(got, why) {
		d.t.Errorf("%s: annotation %s is %q, want it to say %q", name, cryov1.ColdStartAnnotation, got, why)
	}
	rs := p.owner()
	harness.WaitFor(d.t, 30*time.Second, "the cold start Event on ReplicaSet "+rs, func() bool {
		return strings.Contains(d.events(nsDeploy, rs), admission.ReasonColdStart+": restore-from "+deployCkpt+" not used, cold start: ")
	})
	d.checkTicksFromOne(name)
}

// checkTicksFromOne: a cold replica counts from the start.
func (d *deployTest) checkTicksFromOne(name string) {
	d.t.Helper()
	d.WaitTicks(nsDeploy, name, 2)
	if ticks := d.logTicks(nsDeploy, name); ticks[0] != 1 {
		d.t.Errorf("%s started cold but began at tick %d", name, ticks[0])
	}
}

// pods lists the Deployment's pods that are not being deleted.
func (d *deployTest) pods() []deployPod {
	d.t.Helper()
	var list struct{ Items []deployPod }
	if err := d.getJSON("/api/v1/namespaces/"+nsDeploy+"/pods?labelSelector="+url.QueryEscape("app="+deployName), &list); err != nil {
		d.t.Fatalf("list the Deployment's pods: %v", err)
	}
	var live []deployPod
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// waitNew waits until n pods the test has not seen yet run (bound by the
// scheduler, started by the kubelet), with no other new pod beside them,
// and returns them.
func (d *deployTest) waitNew(n int, what string) []deployPod {
	d.t.Helper()
	deadline := time.Now().Add(k8sWait)
	for {
		var fresh []deployPod
		running := 0
		for _, p := range d.pods() {
			if d.known[p.Metadata.Name] {
				continue
			}
			fresh = append(fresh, p)
			if p.Status.Phase == "Running" && p.Spec.NodeName == k8sNodeName {
				running++
			}
		}
		if len(fresh) == n && running == n {
			for _, p := range fresh {
				d.known[p.Metadata.Name] = true
			}
			return fresh
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: %d new pods, %d of them running, want %d\n%s", what, len(fresh), running, n, d.diagnosis())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// diagnosis is what the pods, the ReplicaSets, the controller manager
// and the scheduler say, for a failure.
func (d *deployTest) diagnosis() string {
	out, _ := d.kubectlErr("get", "deployment,replicaset,pods", "-n", nsDeploy, "-o", "wide")
	ev, _ := d.kubectlErr("get", "events", "-n", nsDeploy)
	return out + "\n" + ev + "\n" + d.kcm.tail(20) + "\n" + d.sched.tail(20)
}
