package k8s

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/k8s/controller/admission"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

const (
	apiNS      = "team"
	apiDeploy  = "web"
	apiWarm    = "web-warm" // the Checkpoint the Deployment's template names
	apiDigest  = "registry.test:5000/team/web@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	apiGPU     = "NVIDIA-H200"
	apiTimeout = 20 * time.Second
)

// TestK8sCheckpointAPI takes about a minute: one cluster start (etcd,
// the API server, the controller), then each part in a few seconds.
func TestK8sCheckpointAPI(t *testing.T) {
	a := startAPICluster(t)
	a.setup(t)
	src := a.sourcePod(t)
	t.Run("ChartAccepted", func(t *testing.T) { testChartAccepted(t, a) })
	t.Run("CrossNamespace", func(t *testing.T) { testCrossNamespace(t, a) })
	t.Run("NeedsPodsExec", func(t *testing.T) { testNeedsPodsExec(t, a) })
	t.Run("RequesterRecorded", func(t *testing.T) { testRequesterRecorded(t, a, src) })
	t.Run("ControllerFails", func(t *testing.T) { testControllerFails(t, a, src) })
	t.Run("RestoreFrom", func(t *testing.T) { testRestoreFrom(t, a, src) })
	t.Run("Retention", func(t *testing.T) { testRetention(t, a) })
	t.Run("InvalidTag", func(t *testing.T) { testInvalidTag(t, a, src) })
	t.Run("LeaveRunningFalse", func(t *testing.T) { testLeaveRunningFalse(t, a) })
	t.Run("WebhookDown", func(t *testing.T) { testWebhookDown(t, a) })
}

// setup creates the namespace, its service account "app" (with the
// token mounted, as by default), the RuntimeClass as the chart makes it,
// and the users' rights: alice may create Checkpoints only; bob may too,
// and exec into pods and read the push Secret.
func (a *apiCluster) setup(t *testing.T) {
	ctx := context.Background()
	a.namespace(apiNS, nil)
	role := func(name string, rules ...rbacv1.PolicyRule) client.Object {
		return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: apiNS}, Rules: rules}
	}
	bind := func(r, user string) client.Object {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: r + "-" + user, Namespace: apiNS},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: r},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: apiNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: apiNS}, Type: corev1.SecretTypeDockerConfigJson,
			StringData: map[string]string{corev1.DockerConfigJsonKey: `{"auths":{}}`}},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "cryo"}, Handler: "cryo",
			Scheduling: &nodev1.Scheduling{NodeSelector: map[string]string{"cryo.io/runtime": "ready"}}},
		role("checkpointer", rbacv1.PolicyRule{APIGroups: []string{"cryo.io"}, Resources: []string{"checkpoints"}, Verbs: []string{"create", "get", "list", "update"}}),
		role("exec", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}}),
		role("push", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"regcred"}, Verbs: []string{"get"}}),
		bind("checkpointer", "alice"), bind("checkpointer", "bob"), bind("exec", "bob"), bind("push", "bob"),
	} {
		if err := a.admin.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// deployment is the Deployment whose replicas restore from apiWarm, as
// its author writes it: no defaults, a GPU, an env var from a field.
func deployment() *appsv1.Deployment {
	one := resource.MustParse("1")
	labels := map[string]string{"app": apiDeploy}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: apiDeploy, Namespace: apiNS},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{cryov1.RestoreFromAnnotation: apiWarm}},
				Spec: corev1.PodSpec{ServiceAccountName: "app", NodeName: "node-a", Containers: []corev1.Container{{
					Name: "app", Image: "busybox", Command: []string{"sh", "-c", "sleep 3600"},
					Env:       []corev1.EnvVar{{Name: "MODEL", Value: "llama"}, {Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
					Ports:     []corev1.ContainerPort{{ContainerPort: 8000}},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": one}},
				}}},
			}}}
}

// replica creates a pod from the Deployment's stored template as the
// ReplicaSet controller does (generateName, the template's metadata and
// spec, a controller reference), after edit.
func (a *apiCluster) replica(t *testing.T, edit func(*corev1.PodSpec)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var d appsv1.Deployment
	if err := a.admin.Get(ctx, client.ObjectKey{Namespace: apiNS, Name: apiDeploy}, &d); err != nil {
		t.Fatal(err)
	}
	tmpl := d.Spec.Template.DeepCopy()
	if edit != nil {
		edit(&tmpl.Spec)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: apiDeploy + "-", Namespace: apiNS,
		Labels: tmpl.Labels, Annotations: tmpl.Annotations}, Spec: tmpl.Spec}
	if err := controllerutil.SetControllerReference(&d, pod, a.admin.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := a.admin.Create(ctx, pod); err != nil {
		t.Fatalf("create a replica: %v", err)
	}
	return pod
}

// sourcePod is the Deployment's first replica, running: it starts cold
// (no Checkpoint yet), and the test writes its status as the kubelet
// would.
func (a *apiCluster) sourcePod(t *testing.T) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if err := a.admin.Create(ctx, deployment()); err != nil {
		t.Fatal(err)
	}
	pod := a.replica(t, nil)
	if why := pod.Annotations[cryov1.ColdStartAnnotation]; !strings.Contains(why, "no Checkpoint "+apiWarm) {
		t.Fatalf("the first replica's cold start annotation = %q, want no Checkpoint %s", why, apiWarm)
	}
	a.running(t, pod)
	return pod
}

// running writes the status a kubelet writes for a running pod.
func (a *apiCluster) running(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	now := metav1.Now()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "app", Ready: true, Image: "docker.io/library/busybox:latest", ImageID: "docker.io/library/busybox@sha256:22",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	if err := a.admin.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("pod %s status: %v", pod.Name, err)
	}
}

// checkpoint is a Checkpoint of pod's container app.
func checkpoint(name, pod string) *cryov1.Checkpoint {
	return &cryov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: apiNS},
		Spec: cryov1.CheckpointSpec{PodName: pod, Container: "app", Repository: "registry.test:5000/team/web", PushSecretName: "regcred"}}
}

// testChartAccepted: the API server takes every object the chart renders
// with the controller on (the Deployment, the webhook configuration with
// its generated CA, the policy), on a server-side dry run.
func testChartAccepted(t *testing.T, a *apiCluster) {
	out, err := harness.RunErr(time.Minute, nil, requireHelm(t), "template", helmRelease, filepath.Join(harness.RepoRoot(), "deploy", "helm", "cryo"), "-n", helmNamespace)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	f := filepath.Join(a.dir, "chart.yaml")
	harness.WriteFile(t, f, out)
	got, err := a.kubectlErr("apply", "--dry-run=server", "-f", f)
	if err != nil {
		t.Fatalf("the API server refused the chart: %v\n%s", err, got)
	}
	for _, want := range []string{"deployment.apps/cryo-controller", "mutatingwebhookconfiguration.admissionregistration.k8s.io/cryo",
		"validatingadmissionpolicy.admissionregistration.k8s.io/cryo-checkpoint-requester", "service/cryo-webhook"} {
		if !strings.Contains(got, want) {
			t.Errorf("dry run did not take %s:\n%s", want, got)
		}
	}
}

func testCrossNamespace(t *testing.T, a *apiCluster) {
	ctx := context.Background()
	for _, cp := range []*cryov1.Checkpoint{checkpoint("x-pod", "other/web-0"), checkpoint("x-secret", "web-0")} {
		if cp.Name == "x-secret" {
			cp.Spec.PushSecretName = "other/regcred"
		}
		err := a.admin.Create(ctx, cp)
		if err == nil || !strings.Contains(err.Error(), "names another namespace") {
			t.Errorf("Checkpoint %s (pod %q, secret %q): err = %v, want a refusal naming another namespace",
				cp.Name, cp.Spec.PodName, cp.Spec.PushSecretName, err)
		}
	}
}

func testNeedsPodsExec(t *testing.T, a *apiCluster) {
	ctx := context.Background()
	err := a.as("alice").Create(ctx, checkpoint("by-alice", "web-0"))
	if err == nil || !strings.Contains(err.Error(), `user "alice" may not create pods/exec web-0`) {
		t.Fatalf("alice, without pods/exec: err = %v, want a refusal for pods/exec", err)
	}
	// bob may exec, but not read another Secret to push with.
	cp := checkpoint("by-bob-other-secret", "web-0")
	cp.Spec.PushSecretName = "admin-registry"
	if err := a.as("bob").Create(ctx, cp); err == nil || !strings.Contains(err.Error(), "may not get secrets admin-registry") {
		t.Fatalf("bob, with a Secret he may not read: err = %v, want a refusal", err)
	}
}

// testRequesterRecorded: bob's Checkpoint names him, whatever he wrote
// into the annotations, and the controller assigns it to the pod's node.
func testRequesterRecorded(t *testing.T, a *apiCluster, src *corev1.Pod) {
	ctx := context.Background()
	cp := checkpoint("by-bob", src.Name)
	cp.Annotations = map[string]string{cryov1.RequesterAnnotation: "cluster-admin"}
	if err := a.as("bob", "team-devs").Create(ctx, cp); err != nil {
		t.Fatalf("bob, with pods/exec: %v", err)
	}
	got := a.checkpointIn(t, apiNS, cp.Name, cryov1.PhaseAssigned)
	if u := got.Annotations[cryov1.RequesterAnnotation]; u != "bob" {
		t.Errorf("requester annotation = %q, want bob", u)
	}
	r := got.Status.Requester
	if r == nil || r.Username != "bob" || !strings.Contains(strings.Join(r.Groups, ","), "team-devs") {
		t.Errorf("status.requester = %+v, want bob in team-devs", r)
	}
	// The chart's policy keeps the requester: once the API server has
	// loaded it (a probe shows when), bob cannot rewrite it.
	probe := checkpoint("probe", src.Name)
	if err := a.as("bob").Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	n := 0
	eventually(t, "the requester policy in force", func() (bool, error) {
		n++
		err := a.forgeRequester(ctx, "probe", "mallory-"+strconv.Itoa(n))
		return err != nil && strings.Contains(err.Error(), "cannot change"), err
	})
	if err := a.forgeRequester(ctx, cp.Name, "mallory"); err == nil || !strings.Contains(err.Error(), "cannot change") {
		t.Errorf("bob rewrote the requester of %s: err = %v", cp.Name, err)
	}
	if got.Status.Node != "node-a" || !strings.HasPrefix(got.Status.CompatibilityKey, "v1-") || !controllerutil.ContainsFinalizer(got, cryov1.CleanupFinalizer) {
		t.Errorf("assigned Checkpoint: node %q, key %q, finalizers %v", got.Status.Node, got.Status.CompatibilityKey, got.Finalizers)
	}
}

// forgeRequester is bob trying to rename who asked for Checkpoint name.
func (a *apiCluster) forgeRequester(ctx context.Context, name, user string) error {
	var cp cryov1.Checkpoint
	if err := a.admin.Get(ctx, client.ObjectKey{Namespace: apiNS, Name: name}, &cp); err != nil {
		return err
	}
	cp.Annotations[cryov1.RequesterAnnotation] = user
	return a.as("bob").Update(ctx, &cp)
}

// testControllerFails: a pod that is missing, not running, or lacks the
// container, and a Checkpoint past its timeout, fail with the reason.
func testControllerFails(t *testing.T, a *apiCluster, src *corev1.Pod) {
	ctx := context.Background()
	pending := a.replica(t, nil) // never running
	noCtr := checkpoint("no-container", src.Name)
	noCtr.Spec.Container = "sidecar"
	timeout := checkpoint("timeout", src.Name)
	timeout.Spec.Timeout = &metav1.Duration{Duration: 3 * time.Second}
	cases := map[*cryov1.Checkpoint]string{
		checkpoint("no-pod", "gone"):            cryov1.ReasonPodMissing,
		checkpoint("not-running", pending.Name): cryov1.ReasonPodNotRunning,
		noCtr:                                   cryov1.ReasonContainerMissing,
		timeout:                                 cryov1.ReasonTimeout,
	}
	for cp := range cases {
		if err := a.as("bob").Create(ctx, cp); err != nil {
			t.Fatalf("create %s: %v", cp.Name, err)
		}
	}
	for cp, reason := range cases {
		got := a.checkpointIn(t, apiNS, cp.Name, cryov1.PhaseFailed)
		f := got.Status.Failure
		if f == nil || !strings.HasPrefix(f.Cause, reason+":") || f.Remedy == "" {
			t.Errorf("Checkpoint %s failed with %+v, want cause %s and a remedy", cp.Name, f, reason)
		}
	}
}

// succeed writes what the agent writes when its checkpoint is pushed.
func (a *apiCluster) succeed(t *testing.T, name string, done time.Time, gpus []cryov1.GPU) {
	t.Helper()
	cp := a.checkpointIn(t, apiNS, name, cryov1.PhaseAssigned)
	at := metav1.NewTime(done)
	cp.Status.Phase, cp.Status.Image, cp.Status.GPUs, cp.Status.CompletionTime, cp.Status.Progress = cryov1.PhaseSucceeded, apiDigest, gpus, &at, 100
	if err := a.admin.Status().Update(context.Background(), cp); err != nil {
		t.Fatalf("Checkpoint %s to Succeeded: %v", name, err)
	}
}

// testRestoreFrom: once apiWarm Succeeded, a new replica starts from it;
// a replica whose env changed starts cold, with an Event on the
// Deployment.
func testRestoreFrom(t *testing.T, a *apiCluster, src *corev1.Pod) {
	ctx := context.Background()
	if err := a.as("bob").Create(ctx, checkpoint(apiWarm, src.Name)); err != nil {
		t.Fatal(err)
	}
	a.succeed(t, apiWarm, time.Now(), []cryov1.GPU{{Model: apiGPU, Count: 1, MemoryMiB: 143771}})

	start := time.Now()
	pod := a.replica(t, nil)
	t.Logf("a replica restored from %s created in %s", apiWarm, time.Since(start).Round(time.Millisecond))
	c := pod.Spec.Containers[0]
	if c.Image != apiDigest || pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "cryo" ||
		pod.Annotations[cryov1.RestoredFromAnnotation] != apiWarm || pod.Spec.NodeSelector["cryo.io/runtime"] != "ready" {
		t.Fatalf("restored replica: image %q, runtimeClassName %v, annotations %v, nodeSelector %v",
			c.Image, pod.Spec.RuntimeClassName, pod.Annotations, pod.Spec.NodeSelector)
	}
	if !requiresGPU(pod, apiGPU) {
		t.Errorf("restored replica's affinity %+v does not require %s=%s", pod.Spec.Affinity, cryov1.GPUProductLabel, apiGPU)
	}

	cold := a.replica(t, func(s *corev1.PodSpec) { s.Containers[0].Env[0].Value = "mistral" })
	why := cold.Annotations[cryov1.ColdStartAnnotation]
	if cold.Spec.Containers[0].Image != "busybox" || cold.Spec.RuntimeClassName != nil || !strings.Contains(why, "differs") {
		t.Fatalf("replica with another env: image %q, runtimeClassName %v, cold start %q", cold.Spec.Containers[0].Image, cold.Spec.RuntimeClassName, why)
	}
	eventually(t, "a cold start Event on the Deployment", func() (bool, error) {
		var evs corev1.EventList
		err := a.admin.List(ctx, &evs, client.InNamespace(apiNS))
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Deployment" && e.InvolvedObject.Name == apiDeploy && e.Reason == admission.ReasonColdStart && strings.Contains(e.Message, "differs") {
				return true, nil
			}
		}
		return false, err
	})
}

func requiresGPU(pod *corev1.Pod, model string) bool {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == cryov1.GPUProductLabel && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] == model {
				return true
			}
		}
	}
	return false
}

// testRetention: with keep 2, the third Succeeded Checkpoint of a pod
// deletes the first, which waits for the agent's cleanup (the test plays
// the agent and removes the finalizer); a Checkpoint that never reached
// a node goes at its TTL with no agent at all.
func testRetention(t *testing.T, a *apiCluster) {
	ctx := context.Background()
	// A source of its own: the Deployment's pod has Succeeded Checkpoints
	// of the other tests, and the newest one's count decides.
	src := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "batch-0", Namespace: apiNS}, Spec: corev1.PodSpec{
		ServiceAccountName: "app", NodeName: "node-b", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
	if err := a.admin.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	a.running(t, src)
	keep := int32(2)
	names := []string{"keep-1", "keep-2", "keep-3"}
	base := time.Now().Add(-time.Hour)
	for i, n := range names {
		cp := checkpoint(n, src.Name)
		cp.Spec.Keep = &keep
		if err := a.as("bob").Create(ctx, cp); err != nil {
			t.Fatal(err)
		}
		a.succeed(t, n, base.Add(time.Duration(i)*time.Minute), nil)
	}
	var old cryov1.Checkpoint
	eventually(t, "keep-1 deleted, held by the cleanup finalizer", func() (bool, error) {
		err := a.admin.Get(ctx, client.ObjectKey{Namespace: apiNS, Name: "keep-1"}, &old)
		return err == nil && !old.DeletionTimestamp.IsZero(), err
	})
	for _, n := range names[1:] {
		var cp cryov1.Checkpoint
		if err := a.admin.Get(ctx, client.ObjectKey{Namespace: apiNS, Name: n}, &cp); err != nil || !cp.DeletionTimestamp.IsZero() {
			t.Errorf("%s: err %v, deleted at %v; want it kept", n, err, cp.DeletionTimestamp)
		}
	}
	controllerutil.RemoveFinalizer(&old, cryov1.CleanupFinalizer) // the agent, done
	if err := a.admin.Update(ctx, &old); err != nil {
		t.Fatal(err)
	}
	a.gone(t, "keep-1")

	ttl := checkpoint("ttl", "gone")
	ttl.Spec.TTL = &metav1.Duration{Duration: 2 * time.Second}
	if err := a.as("bob").Create(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	a.checkpointIn(t, apiNS, "ttl", cryov1.PhaseFailed)
	a.gone(t, "ttl")
}

func (a *apiCluster) gone(t *testing.T, name string) {
	t.Helper()
	eventually(t, "Checkpoint "+name+" gone", func() (bool, error) {
		err := a.admin.Get(context.Background(), client.ObjectKey{Namespace: apiNS, Name: name}, &cryov1.Checkpoint{})
		return client.IgnoreNotFound(err) == nil && err != nil, client.IgnoreNotFound(err)
	})
}

// testWebhookDown: with the controller stopped, a replica is still
// created, cold (failurePolicy Ignore), but no Checkpoint can be created
// (failurePolicy Fail: nobody would check the requester's rights).
func testWebhookDown(t *testing.T, a *apiCluster) {
	a.stopController()
	start := time.Now()
	pod := a.replica(t, nil)
	if pod.Spec.Containers[0].Image != "busybox" || pod.Annotations[cryov1.RestoredFromAnnotation] != "" {
		t.Errorf("replica with the webhook down: image %q, annotations %v; want it as its template", pod.Spec.Containers[0].Image, pod.Annotations)
	}
	t.Logf("a replica created with the webhook down in %s", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("creating a pod with the webhook down took %s", d)
	}
	if err := a.as("bob").Create(context.Background(), checkpoint("while-down", "web-0")); err == nil {
		t.Error("a Checkpoint was created while its webhook was down")
	}
}

// testInvalidTag: a name longer than an OCI tag may be, or a repository
// with a tag, is refused at creation with what to do, not at the push.
func testInvalidTag(t *testing.T, a *apiCluster, src *corev1.Pod) {
	ctx := context.Background()
	long := checkpoint(strings.Repeat("t", cryov1.MaxTagLength+1), src.Name)
	tagged := checkpoint("tagged", src.Name)
	tagged.Spec.Repository += ":v1"
	for cp, want := range map[*cryov1.Checkpoint]string{long: "more than the 128 a tag may have", tagged: "carries a tag or digest"} {
		err := a.as("bob").Create(ctx, cp)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Checkpoint of a %d-character name, repository %s: err = %v, want %q", len(cp.Name), cp.Spec.Repository, err, want)
		}
	}
}

// testLeaveRunningFalse: bob may exec but not delete pods, so he may not
// ask for the pod's end; the admin's Checkpoint deletes its pod once it
// Succeeded, and a failed one leaves its pod alone.
func testLeaveRunningFalse(t *testing.T, a *apiCluster) {
	ctx := context.Background()
	no := false
	stopping := func(name, pod string) *cryov1.Checkpoint {
		cp := checkpoint(name, pod)
		cp.Spec.LeaveRunning = &no
		return cp
	}
	if err := a.as("bob").Create(ctx, stopping("by-bob-stop", "web-0")); err == nil || !strings.Contains(err.Error(), "may not delete pods web-0") {
		t.Fatalf("bob, without delete on pods: err = %v, want a refusal", err)
	}
	done, failed := a.replica(t, nil), a.replica(t, nil)
	a.running(t, done)
	a.running(t, failed)
	for _, cp := range []*cryov1.Checkpoint{stopping("stop-done", done.Name), stopping("stop-failed", failed.Name)} {
		if err := a.admin.Create(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	a.succeed(t, "stop-done", time.Now(), nil)
	cp := a.checkpointIn(t, apiNS, "stop-failed", cryov1.PhaseAssigned)
	cp.Status.Phase, cp.Status.Failure = cryov1.PhaseFailed, &cryov1.Failure{Step: "push", Cause: "PushFailed: refused"}
	if err := a.admin.Status().Update(ctx, cp); err != nil {
		t.Fatal(err)
	}
	var got cryov1.Checkpoint
	eventually(t, "the SourceDeleted condition", func() (bool, error) {
		err := a.admin.Get(ctx, client.ObjectKey{Namespace: apiNS, Name: "stop-done"}, &got)
		return meta.IsStatusConditionTrue(got.Status.Conditions, cryov1.ConditionSourceDeleted), err
	})
	if got.Status.PodUID != string(done.UID) {
		t.Errorf("status.podUID %q, want the pod's %s", got.Status.PodUID, done.UID)
	}
	// No kubelet confirms the deletion: the pod stays, marked deleted.
	var pod corev1.Pod
	if err := a.admin.Get(ctx, client.ObjectKeyFromObject(done), &pod); err == nil && pod.DeletionTimestamp.IsZero() {
		t.Errorf("pod %s is not deleted though its Checkpoint says so", done.Name)
	}
	time.Sleep(2 * time.Second) // a round of the controller on the failed one
	if err := a.admin.Get(ctx, client.ObjectKeyFromObject(failed), &pod); err != nil || !pod.DeletionTimestamp.IsZero() {
		t.Errorf("the pod of a failed Checkpoint was deleted: %v", err)
	}
	if err := a.admin.Get(ctx, client.ObjectKey{Namespace: apiNS, Name: "stop-failed"}, &got); err != nil ||
		meta.FindStatusCondition(got.Status.Conditions, cryov1.ConditionSourceDeleted) != nil {
		t.Errorf("a failed Checkpoint has a SourceDeleted condition: %v %+v", err, got.Status.Conditions)
	}
}
