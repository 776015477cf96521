package k8s

import (
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

const (
	chartController = "cryo-controller" // the chart's names for release "cryo"
	chartAgent      = "cryo-agent"
	chartWebhook    = "cryo-webhook"
	controllerUID   = 65532 // the controller's runAsUser in the chart
)

// chartPods are the node's side of the controller and agent pods.
type chartPods struct {
	dir                     string // their token and certificate directories
	webhookPort, probePort  int    // the controller's, on the node
	agentProbePort          int
	controllerPod, agentPod string
}

func TestKubeletHelmController(t *testing.T) {
	helm := requireHelm(t)
	began := time.Now()
	c := startK8sClusterOn(t, harness.StartCRINode) // the RuntimeClass is the chart's
	t.Logf("cluster up in %s", time.Since(began).Round(time.Millisecond))
	pub, reg := harness.StartRegistry(t), harness.StartPrivateRegistry(t)
	c.app = pub.Addr + "/cryo/app:v1"
	c.node.PublishApp(c.app)
	c.loadInstallerImage()
	c.namespace(helmNamespace, map[string]string{psaEnforce: "privileged"})
	c.namespace(nsApps, nil)
	c.kubectl("label", "node", k8sNodeName, "cryo.io/runtime=ready")
	c.kubectl("create", "secret", "docker-registry", agentSecret, "-n", nsApps, "--docker-server="+reg.Addr,
		"--docker-username="+harness.PrivateUser, "--docker-password="+harness.PrivatePassword)
	cp := &chartPods{dir: filepath.Join(c.dir, "chart-pods"), webhookPort: testsupport.FreePort(t), probePort: testsupport.FreePort(t),
		agentProbePort: testsupport.FreePort(t)}
	chart := filepath.Join(harness.RepoRoot(), "deploy", "helm", "cryo")
	values := c.chartPodValues(cp)
	harness.WantIn(t, c.helm(helm, "lint", chart, "-f", values), "0 chart(s) failed")

	took := time.Now()
	c.helm(helm, "install", helmRelease, chart, "-n", helmNamespace, "-f", values)
	c.writePodFiles(cp)
	cp.controllerPod = c.playDeploymentController(chartController)
	cp.agentPod = helmDaemonSetPod(chartAgent)
	c.playDaemonSetControllerOf(chartAgent, cp.agentPod)
	// The source of the Checkpoint below; its sandbox also brings up the
	// pod network's bridge, where the webhook's endpoint is.
	c.RunPod(appPod(nsApps, "source", c.app, podOpts{}))
	ip := c.waitReady(cp.controllerPod)
	t.Logf("controller pod Ready (%s) %s after helm install", ip, time.Since(took).Round(time.Millisecond))
	c.waitPod(nsApps, "source", "Running")
	c.playEndpointSlice(cp, ip)
	c.waitReady(cp.agentPod)

	took = time.Now()
	testChartWebhookRefuses(c, cp)
	t.Logf("Checkpoint webhook answered in %s", time.Since(took).Round(time.Millisecond))
	testChartCheckpointRestore(c, cp, reg.Addr+"/ckpt/chart")
	t.Logf("took %s", time.Since(began).Round(time.Millisecond))
}

// chartPodValues writes the chart's values for the two pods: the
// imported image, host networking with free ports, the API server's
// address (no kube-proxy for the service address), the node's kubelet,
// and the token and certificate directories.
func (c *k8sCluster) chartPodValues(cp *chartPods) string {
	c.t.Helper()
	port := c.apiURL[strings.LastIndex(c.apiURL, ":")+1:]
	env := []any{map[string]string{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
		map[string]string{"name": "KUBERNETES_SERVICE_PORT", "value": port}}
	token := func(who string) (any, any) {
		dir := filepath.Join(cp.dir, who+"-token")
		mkdirAll(c.t, dir)
		return []any{map[string]any{"name": "token", "hostPath": map[string]any{"path": dir, "type": "Directory"}}},
			[]any{map[string]any{"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}}
	}
	certs := filepath.Join(cp.dir, "webhook-cert")
	mkdirAll(c.t, certs)
	ctlVols, ctlMounts := token("controller")
	agentVols, agentMounts := token("agent")
	v := map[string]any{
		"image": map[string]any{"repository": strings.Split(installerRef, ":")[0], "tag": "test", "pullPolicy": "Never"},
		"controller": map[string]any{"hostNetwork": true, "automountToken": false, "probePort": cp.probePort, "env": env,
			"extraVolumes": ctlVols, "extraVolumeMounts": ctlMounts,
			"webhook": map[string]any{"port": cp.webhookPort, "certVolume": map[string]any{"hostPath": map[string]any{"path": certs, "type": "Directory"}}}},
		"agent": map[string]any{"hostNetwork": true, "automountToken": false, "env": env, "probePort": cp.agentProbePort,
			"kubeletPort": c.kubeletPort, "kubeletCheckpoints": c.archiveDir(), "workDir": filepath.Join(c.dir, "agent-work"),
			"extraVolumes": agentVols, "extraVolumeMounts": agentMounts},
	}
	p := filepath.Join(c.dir, "chart-pods.json")
	harness.WriteFile(c.t, p, string(harness.MustJSON(c.t, v)))
	return p
}

// writePodFiles writes what the kubelet's volumes would hold: each
// ServiceAccount's token (TokenRequest), the CA and the namespace; and
// the serving certificate from the chart's Secret, owned by the
// controller's user as the kubelet's fsGroup handling would leave it.
func (c *k8sCluster) writePodFiles(cp *chartPods) {
	c.t.Helper()
	ca, err := os.ReadFile(c.pki.caCert)
	if err != nil {
		c.t.Fatal(err)
	}
	for who, sa := range map[string]string{"controller": chartController, "agent": chartAgent} {
		dir := filepath.Join(cp.dir, who+"-token")
		tok := strings.TrimSpace(c.kubectl("create", "token", sa, "-n", helmNamespace, "--duration=1h"))
		files := map[string]string{"token": tok, "ca.crt": string(ca), "namespace": helmNamespace}
		c.writeOwned(dir, files, who == "controller")
	}
	files := map[string]string{}
	for _, k := range []string{"tls.crt", "tls.key"} {
		b64 := c.kubectl("get", "secret", "-n", helmNamespace, chartWebhook+"-cert", "-o", "jsonpath={.data."+strings.ReplaceAll(k, ".", `\.`)+"}")
		data, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(data) == 0 {
			c.t.Fatalf("the chart's webhook Secret's %s: %v (%q)", k, err, b64)
		}
		files[k] = string(data)
	}
	c.writeOwned(filepath.Join(cp.dir, "webhook-cert"), files, true)
}

// writeOwned writes files into dir, 0600; owned by the controller's user
// if ctl.
func (c *k8sCluster) writeOwned(dir string, files map[string]string, ctl bool) {
	c.t.Helper()
	chown := func(p string) {
		if ctl {
			if err := os.Chown(p, controllerUID, controllerUID); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	chown(dir)
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			c.t.Fatal(err)
		}
		chown(p)
	}
}

// playDeploymentController creates the Deployment's ReplicaSet and its one
// pod from the template, on the node, each owned by the one above, as
// the Deployment and ReplicaSet controllers do; it returns the pod's name.
func (c *k8sCluster) playDeploymentController(name string) string {
	c.t.Helper()
	var d struct {
		Metadata struct{ Name, UID string }
		Spec     struct {
			Selector map[string]any `json:"selector"`
			Template struct {
				Metadata map[string]any `json:"metadata"`
				Spec     map[string]any `json:"spec"`
			}
		}
	}
	if err := c.getJSON("/apis/apps/v1/namespaces/"+helmNamespace+"/deployments/"+name, &d); err != nil {
		c.t.Fatalf("get the chart's Deployment %s: %v", name, err)
	}
	const hash = "0" // pod-template-hash: one template, one ReplicaSet
	meta := d.Spec.Template.Metadata
	labels, _ := meta["labels"].(map[string]any)
	labels["pod-template-hash"] = hash
	sel := d.Spec.Selector["matchLabels"].(map[string]any)
	sel["pod-template-hash"] = hash
	rsName := name + "-" + hash
	rs := map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{"name": rsName, "namespace": helmNamespace, "labels": labels,
			"ownerReferences": []any{owner("apps/v1", "Deployment", d.Metadata.Name, d.Metadata.UID)}},
		"spec": map[string]any{"replicas": 1, "selector": d.Spec.Selector,
			"template": map[string]any{"metadata": meta, "spec": d.Spec.Template.Spec}}}
	if out, err := c.apply(rs); err != nil {
		c.t.Fatalf("create ReplicaSet %s: %v\n%s", rsName, err, out)
	}
	var got struct{ Metadata struct{ UID string } }
	if err := c.getJSON("/apis/apps/v1/namespaces/"+helmNamespace+"/replicasets/"+rsName, &got); err != nil {
		c.t.Fatal(err)
	}
	pod := rsName + "-play"
	meta["name"], meta["namespace"] = pod, helmNamespace
	meta["ownerReferences"] = []any{owner("apps/v1", "ReplicaSet", rsName, got.Metadata.UID)}
	spec := d.Spec.Template.Spec
	spec["nodeName"] = k8sNodeName
	c.RunPod(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
	return pod
}

// owner is a controller owner reference.
func owner(apiVersion, kind, name, uid string) map[string]any {
	return map[string]any{"apiVersion": apiVersion, "kind": kind, "name": name, "uid": uid,
		"controller": true, "blockOwnerDeletion": true}
}

// waitReady waits until the pod's Ready condition is True (its readiness
// probe passed) and returns its address; a pod that stops fails the test
// with its log.
func (c *k8sCluster) waitReady(pod string) string {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var p struct {
			Status struct {
				Phase      string
				PodIP      string `json:"podIP"`
				Conditions []struct{ Type, Status string }
			}
		}
		err := c.getJSON("/api/v1/namespaces/"+helmNamespace+"/pods/"+pod, &p)
		for _, cond := range p.Status.Conditions {
			if err == nil && cond.Type == "Ready" && cond.Status == "True" {
				return p.Status.PodIP
			}
		}
		if p.Status.Phase == "Failed" || p.Status.Phase == "Succeeded" || time.Now().After(deadline) {
			logs, _ := c.kubectlErr("logs", "-n", helmNamespace, pod)
			desc, _ := c.kubectlErr("describe", "pod", "-n", helmNamespace, pod)
			c.t.Fatalf("pod %s not Ready (%s, %v)\nlog:\n%s\n%s", pod, p.Status.Phase, err, logs, desc)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// playEndpointSlice writes the webhook Service's EndpointSlice, as the
// EndpointSlice controller does for the Ready pod its selector picks. The
// pod's address is the node's, loopback here, which no EndpointSlice may
// hold: the slice names the node's address on the pod network (the CNI
// bridge's gateway, up once a pod of that network runs), where the
// pod's host-network port is as well.
func (c *k8sCluster) playEndpointSlice(cp *chartPods, podIP string) {
	c.t.Helper()
	_, subnet, err := net.ParseCIDR(c.node.Subnet)
	if err != nil {
		c.t.Fatal(err)
	}
	gw := subnet.IP.To4()
	gw[3]++
	var pod struct{ Metadata struct{ UID string } }
	if err := c.getJSON("/api/v1/namespaces/"+helmNamespace+"/pods/"+cp.controllerPod, &pod); err != nil {
		c.t.Fatal(err)
	}
	slice := map[string]any{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata": map[string]any{"name": chartWebhook + "-play", "namespace": helmNamespace,
			"labels": map[string]string{"kubernetes.io/service-name": chartWebhook, "endpointslice.kubernetes.io/managed-by": "cryo-test"}},
		"addressType": "IPv4",
		"endpoints": []any{map[string]any{"addresses": []string{gw.String()}, "conditions": map[string]bool{"ready": true},
			"nodeName": k8sNodeName, "targetRef": map[string]any{"kind": "Pod", "namespace": helmNamespace, "name": cp.controllerPod, "uid": pod.Metadata.UID}}},
		"ports": []any{map[string]any{"name": "webhook", "port": cp.webhookPort, "protocol": "TCP"}}}
	if out, err := c.apply(slice); err != nil {
		c.t.Fatalf("create the webhook's EndpointSlice: %v\n%s", err, out)
	}
	c.t.Logf("webhook Service %s -> %s:%d (pod %s at %s)", chartWebhook, gw, cp.webhookPort, cp.controllerPod, podIP)
}

// checkpointObject is a Checkpoint of pod's container app in nsApps.
func checkpointObject(name, pod, repo string) map[string]any {
	return map[string]any{"apiVersion": "cryo.io/v1alpha1", "kind": "Checkpoint",
		"metadata": map[string]any{"name": name, "namespace": nsApps},
		"spec":     map[string]any{"podName": pod, "container": "app", "repository": repo, "pushSecretName": agentSecret}}
}

// testChartWebhookRefuses: the API server calls the chart's Checkpoint
// webhook through its Service, trusting the caBundle Helm generated, and
// the webhook refuses a Checkpoint of another namespace's pod. (Polled:
// the API server's informers see the EndpointSlice a moment later.)
func testChartWebhookRefuses(c *k8sCluster, cp *chartPods) {
	c.t.Helper()
	var out string
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		out, err = c.apply(checkpointObject("x-pod", "other/source", "registry.test/ckpt/x"))
		if err == nil || strings.Contains(out, "denied the request") || time.Now().After(deadline) {
			break
		}
	}
	if err == nil || !strings.Contains(out, `admission webhook "checkpoints.cryo.io" denied the request`) || !strings.Contains(out, "names another namespace") {
		logs, _ := c.kubectlErr("logs", "-n", helmNamespace, cp.controllerPod)
		c.t.Fatalf("Checkpoint of pod other/source: %v\n%s\nwant the webhook's refusal naming another namespace\ncontroller log:\n%s\nAPI server:\n%s",
			err, out, logs, c.apiserver.tail(20))
	}
	c.t.Logf("refused: %s", strings.TrimSpace(out))
}

// testChartCheckpointRestore: a Checkpoint of a running pod, assigned to
// the node by the controller pod and carried out by the agent pod, pushes
// an image; a pod annotated cryo.io/restore-from is then started from it
// by the pod webhook and carries on the source's counter.
func testChartCheckpointRestore(c *k8sCluster, cp *chartPods, repo string) {
	c.t.Helper()
	c.waitPod(nsApps, "source", "Running")
	c.WaitTicks(nsApps, "source", 3)
	took := time.Now()
	if out, err := c.apply(checkpointObject("first", "source", repo)); err != nil {
		c.t.Fatalf("create Checkpoint first: %v\n%s", err, out)
	}
	before := harness.LastOf(c.logTicks(nsApps, "source"))
	ck, seen := c.waitCheckpoint(nsApps, "first")
	c.t.Logf("Checkpoint first: %v in %s", seen, time.Since(took).Round(time.Millisecond))
	if ck.Status.Phase != cryov1.PhaseSucceeded || ck.Status.Node != k8sNodeName {
		logs, _ := c.kubectlErr("logs", "-n", helmNamespace, cp.agentPod)
		ctl, _ := c.kubectlErr("logs", "-n", helmNamespace, cp.controllerPod)
		c.t.Fatalf("Checkpoint first: phase %s on node %q, failure %+v\nagent log:\n%s\ncontroller log:\n%s",
			ck.Status.Phase, ck.Status.Node, ck.Status.Failure, logs, ctl)
	}
	checkSucceeded(c.t, ck, repo)
	after := harness.LastOf(c.logTicks(nsApps, "source"))

	pod := appPod(nsApps, "restored", c.app, podOpts{pullSecret: agentSecret})
	pod["metadata"].(map[string]any)["annotations"] = map[string]string{cryov1.RestoreFromAnnotation: "first"}
	c.RunPod(pod)
	var got struct {
		Metadata struct{ Annotations map[string]string }
		Spec     struct {
			RuntimeClassName string `json:"runtimeClassName"`
			Containers       []struct{ Image string }
		}
	}
	if err := c.getJSON("/api/v1/namespaces/"+nsApps+"/pods/restored", &got); err != nil {
		c.t.Fatal(err)
	}
	if img := got.Spec.Containers[0].Image; img != ck.Status.Image || got.Metadata.Annotations[cryov1.RestoredFromAnnotation] != "first" || got.Spec.RuntimeClassName != "cryo" {
		c.t.Fatalf("pod restored from first: image %q, runtimeClassName %q, annotations %v; want %s from the pod webhook",
			img, got.Spec.RuntimeClassName, got.Metadata.Annotations, ck.Status.Image)
	}
	c.waitPod(nsApps, "restored", "Running")
	c.WaitTicks(nsApps, "restored", 3)
	ticks := c.logTicks(nsApps, "restored")
	if ticks[0] <= before || ticks[0] > after+1 {
		c.t.Fatalf("restored pod's first tick %d; want one after %d (the checkpoint), at most %d", ticks[0], before, after+1)
	}
	c.t.Logf("restored from %s: ticks %d…%d (checkpoint after tick %d)", ck.Status.Image, ticks[0], harness.LastOf(ticks), before)
}
