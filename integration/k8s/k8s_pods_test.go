package k8s

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// k8sPod is the part of a pod's API object the tests read.
type k8sPod struct {
	Status struct {
		Phase             string
		ContainerStatuses []struct {
			Name  string
			State struct {
				Waiting    *struct{ Reason, Message string }
				Running    *struct{ StartedAt string }
				Terminated *struct {
					ExitCode        int
					Reason, Message string
				}
			}
		}
	}
}

// waiting is the first container's waiting reason and message, if it waits.
func (p *k8sPod) waiting() (reason, message string) {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return w.Reason, w.Message
		}
		// A container whose start failed (a refused restore) ends
		// terminated with StartError, never having run.
		if tm := cs.State.Terminated; tm != nil && tm.Reason == "StartError" {
			return tm.Reason, tm.Message
		}
	}
	return "", ""
}

// everRan reports whether a container of the pod runs or has run.
func (p *k8sPod) everRan() bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil && cs.State.Terminated.Reason != "StartError" {
			return true
		}
	}
	return false
}

// podSecurity is the securityContext pair a pod gets: "restricted" (what
// the restricted Pod Security profile demands, with uid podOpts.uid),
// "privileged", or none.
type podSecurity string

const (
	restricted podSecurity = "restricted"
	privileged podSecurity = "privileged"
)

// podOpts are how one test pod differs from another.
type podOpts struct {
	sec        podSecurity
	uid        int64  // the uid of a restricted pod
	pullSecret string // the image pull secret, if any
}

// k8sTicker prints a tick line every 100 ms in the fake app's format.
const k8sTicker = `i=0; while :; do i=$((i+1)); echo "tick $i state=running sum=OK"; sleep 0.1; done`

// appPod is a pod on the test node with one container "app" of image
// (the app's, or a checkpoint of it: both run the image's command) under
// the RuntimeClass cryo.
func appPod(ns, name, image string, o podOpts) map[string]any {
	// A CPU workload that ticks as the fake CUDA app does: the kubelet's
	// pods get no GPU (that takes a device plugin), and the shim gives a
	// container without a GPU node no GPU; the CUDA side of the same flow
	// runs through CRI (TestCRIRestore, TestRunnableImage) and on GPUs.
	ctr := map[string]any{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
		"command": []string{"/bin/sh", "-c", k8sTicker}}
	spec := map[string]any{"nodeName": k8sNodeName, "runtimeClassName": "cryo", "restartPolicy": "Never",
		"automountServiceAccountToken": false, "terminationGracePeriodSeconds": 1, "containers": []any{ctr}}
	if o.pullSecret != "" {
		spec["imagePullSecrets"] = []any{map[string]string{"name": o.pullSecret}}
	}
	switch o.sec {
	case restricted:
		spec["securityContext"] = map[string]any{"runAsNonRoot": o.uid != 0, "runAsUser": o.uid, "runAsGroup": o.uid,
			"seccompProfile": map[string]string{"type": "RuntimeDefault"}}
		ctr["securityContext"] = map[string]any{"allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []string{"ALL"}}}
	case privileged:
		ctr["securityContext"] = map[string]any{"privileged": true}
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec}
}

// runPod creates the pod and fails the test if the API server refuses it.
func (c *k8sCluster) RunPod(pod map[string]any) {
	c.t.Helper()
	if out, err := c.apply(pod); err != nil {
		c.t.Fatalf("create pod: %v\n%s", err, out)
	}
}

// pod reads a pod's API object.
func (c *k8sCluster) pod(ns, name string) *k8sPod {
	c.t.Helper()
	var p k8sPod
	if err := c.getJSON("/api/v1/namespaces/"+ns+"/pods/"+name, &p); err != nil {
		c.t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return &p
}

// waitPod waits until the pod is in phase, failing the test with what
// kubectl describe and the kubelet say when it is not in time, or when it
// reaches another final phase.
func (c *k8sCluster) waitPod(ns, name, phase string) {
	c.t.Helper()
	c.waitPodFor(ns, name, "phase "+phase, func(p *k8sPod) (bool, bool) {
		final := p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed"
		return p.Status.Phase == phase, final
	})
}

// waitPodFor polls the pod until cond reports done (or stop: it will never
// be), failing the test when it stops or the deadline passes.
func (c *k8sCluster) waitPodFor(ns, name, what string, cond func(*k8sPod) (done, stop bool)) *k8sPod {
	c.t.Helper()
	deadline := time.Now().Add(k8sWait)
	for {
		p := c.pod(ns, name)
		done, stop := cond(p)
		if done {
			return p
		}
		if stop || time.Now().After(deadline) {
			out, _ := c.kubectlErr("describe", "pod", "-n", ns, name)
			c.t.Fatalf("pod %s/%s: no %s (phase %s)\n%s\n%s", ns, name, what, p.Status.Phase, out, c.kubelet.tail(30))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// logTicks reads the app's ticks from the pod's log, through the API
// server and the kubelet (kubectl logs).
func (c *k8sCluster) logTicks(ns, name string) []int {
	c.t.Helper()
	return harness.FakeTicks(c.t, ns+"/"+name, c.kubectl("logs", "-n", ns, name))
}

// WaitTicks waits until the pod's log holds n ticks more than now.
func (c *k8sCluster) WaitTicks(ns, name string, n int) {
	c.t.Helper()
	start := len(c.logTicks(ns, name))
	harness.WaitFor(c.t, 30*time.Second, fmt.Sprintf("%d ticks in %s/%s", n, ns, name), func() bool {
		return len(c.logTicks(ns, name)) >= start+n
	})
}

// kubeletPost POSTs to the kubelet's API on path as the client holding
// cert ("" for none), and returns the status and body.
func (c *k8sCluster) kubeletPost(cert, path string) (int, string) {
	c.t.Helper()
	client := c.tlsClient(cert)
	client.Timeout = harness.CRICall + 30*time.Second
	resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d%s", c.kubeletPort, path), "", nil)
	if err != nil {
		c.t.Fatalf("POST kubelet %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// checkpoint asks the kubelet's checkpoint API, as the admin, for an
// archive of a pod's container, and returns its path on the node.
func (c *k8sCluster) Checkpoint(ns, pod, container string) string {
	c.t.Helper()
	path := "/checkpoint/" + ns + "/" + pod + "/" + container
	code, body := c.kubeletPost("admin", path)
	if code != http.StatusOK {
		c.t.Fatalf("POST kubelet %s: %d %s\n%s\n%s", path, code, body, c.kubelet.tail(20), c.criuDumpLogs())
	}
	var answer struct{ Items []string }
	if err := json.Unmarshal([]byte(body), &answer); err != nil || len(answer.Items) != 1 {
		c.t.Fatalf("POST kubelet %s: answer %q (%v), want one archive in items", path, body, err)
	}
	return answer.Items[0]
}

// criContainers lists the containers CRI holds for a pod, in any state.
func (c *k8sCluster) criContainers(ns, pod string) []*criapi.Container {
	c.t.Helper()
	ctx, cancel := c.node.Ctx()
	defer cancel()
	resp, err := c.node.Rt.ListContainers(ctx, &criapi.ListContainersRequest{Filter: &criapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": pod}}})
	if err != nil {
		c.t.Fatalf("CRI ListContainers: %v", err)
	}
	return resp.GetContainers()
}

// events are the messages of the events about a pod.
func (c *k8sCluster) events(ns, pod string) string {
	c.t.Helper()
	var list struct {
		Items []struct {
			InvolvedObject  struct{ Name string }
			Reason, Message string
		}
	}
	if err := c.getJSON("/api/v1/namespaces/"+ns+"/events", &list); err != nil {
		c.t.Fatalf("events of %s: %v", ns, err)
	}
	var b strings.Builder
	for _, e := range list.Items {
		if e.InvolvedObject.Name == pod {
			fmt.Fprintf(&b, "%s: %s\n", e.Reason, e.Message)
		}
	}
	return b.String()
}

// criuDumpLogs is the end of each CRIU dump log in the node's task state,
// for a failed checkpoint.
func (c *k8sCluster) criuDumpLogs() string {
	logs, _ := filepath.Glob(filepath.Join(c.node.Dir, "state", "io.containerd.runtime.v2.task", harness.CRINamespace, "*", "criu-dump.log"))
	var b strings.Builder
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		fmt.Fprintf(&b, "--- %s ---\n%s\n", l, harness.LastLines(string(data), 25))
	}
	return b.String()
}
