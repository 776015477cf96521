package k8s

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

const (
	helmVersion   = "v3.22.0"
	helmNamespace = "cryo-system"
	helmRelease   = "cryo"
	helmDaemonSet = "cryo" // the chart's fullname for release "cryo"
	installerRef  = "localhost/cryo/installer:test"
	nsApps        = "apps"
)

// requireHelm returns the helm that contrib/kubernetes/build-helm.sh
// built ($CRYO_HELM_DIR or /var/cache/cryo-helm/<version>); it skips where
// that build failed, saying why, and fails where it never ran.
func requireHelm(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CRYO_HELM_DIR")
	if dir == "" {
		dir = filepath.Join("/var/cache/cryo-helm", helmVersion)
	}
	p := filepath.Join(dir, "helm")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if why, err := os.ReadFile(filepath.Join(dir, "build.failed")); err == nil {
		t.Skipf("no helm: helm %s cannot be built on this machine (contrib/kubernetes/build-helm.sh failed):\n%s", helmVersion, why)
	}
	t.Fatalf("helm missing in %s: run `make deps` or contrib/kubernetes/build-helm.sh", dir)
	return ""
}

// helmNode is the node's side of the test: its files under host, and its
// containerd, restarted by a SIGTERM to the pid in pidFile.
type helmNode struct {
	host    string // the installer's paths: prefix, drop-in directory, state
	pidFile string
	values  string // the chart's values for this node
}

func TestKubeletHelm(t *testing.T) {
	helm := requireHelm(t)
	began := time.Now()
	var hn helmNode
	c := startK8sClusterOn(t, func(t testing.TB) *harness.CRINode {
		n := harness.BootCRINodeWith(t, 0, false, func(n *harness.CRINode) {
			n.NoCryo, n.PIDFile = true, filepath.Join(n.Dir, "containerd.pid")
		})
		n.ImportImages(harness.NewRootfs(n.T, n.ImageDir()), map[string][]string{harness.TestImage: {"/bin/fakecuda-app", "100"}})
		return n
	})
	t.Logf("cluster up in %s", time.Since(began).Round(time.Millisecond))
	hn.pidFile = c.node.PIDFile
	hn.host = c.helmHost()
	hn.values = c.helmValues(hn)
	pub := harness.StartRegistry(t)
	c.app = pub.Addr + "/cryo/app:v1"
	c.node.PublishApp(c.app)
	c.loadInstallerImage()
	c.namespace(helmNamespace, map[string]string{psaEnforce: "privileged"})
	c.namespace(nsApps, nil)
	c.kubectl("label", "node", k8sNodeName, "nvidia.com/gpu.present=true")
	chart := filepath.Join(harness.RepoRoot(), "deploy", "helm", "cryo")
	before := c.helmSnapshot(hn)

	lint := c.helm(helm, "lint", chart, "-f", hn.values)
	harness.WantIn(t, lint, "0 chart(s) failed")
	rendered := filepath.Join(c.dir, "rendered.yaml")
	harness.WriteFile(t, rendered, c.helm(helm, "template", helmRelease, chart, "-n", helmNamespace, "-f", hn.values))
	t.Logf("server-side dry run of the rendered chart:\n%s", c.kubectl("apply", "--dry-run=server", "-f", rendered))

	// A pod of the stock runtime runs across the install's restart of containerd.
	c.RunPod(plainPod(nsApps, "bystander", c.app))
	c.waitPod(nsApps, "bystander", "Running")
	bystander := c.criContainers(nsApps, "bystander")[0].Id
	pid := c.containerdPid(hn)

	unblock := c.blockDropIn(hn)
	took := time.Now()
	c.helm(helm, "install", helmRelease, chart, "-n", helmNamespace, "-f", hn.values)
	c.writeToken(hn)
	c.playDaemonSetController()
	testHelmFailed(c, unblock)
	c.waitNodeLabel("ready")
	t.Logf("node labelled %s=ready %s after helm install", "cryo.io/runtime", time.Since(took).Round(time.Millisecond))
	c.checkInstalled(hn, pid, bystander)

	reg := testHelmCryoPod(c, hn)
	testHelmUpgrade(c, hn, helm, chart, releaseOf(t), reg)

	// helm uninstall deletes the DaemonSet; its pod, stopped, finds it gone
	// and reverts the node.
	pid = c.containerdPid(hn)
	took = time.Now()
	c.helm(helm, "uninstall", helmRelease, "-n", helmNamespace)
	c.playGarbageCollector()
	t.Logf("node reverted %s after helm uninstall", time.Since(took).Round(time.Millisecond))
	// The installer's watch sees the DaemonSet deleted and removes the
	// label, unless helm has already deleted the roles that allow it (it
	// deletes a release's objects in no guaranteed order): with the
	// RuntimeClass gone, no pod can ask for cryo either way.
	t.Logf("node label after uninstall: cryo.io/runtime=%q", c.nodeLabels()["cryo.io/runtime"])
	if c.containerdPid(hn) == pid {
		t.Errorf("containerd was not restarted by the uninstall (pid %d)", pid)
	}
	c.checkSame(before, c.helmSnapshot(hn))
	if _, err := c.kubectlErr("get", "runtimeclass", "cryo"); err == nil {
		t.Error("RuntimeClass cryo still there after helm uninstall")
	}
	harness.WaitFor(t, time.Minute, "the node Ready after the uninstall's restart", func() bool { ok, _ := c.nodeReady(); return ok })
	t.Logf("took %s", time.Since(began).Round(time.Millisecond))
}

// testHelmCryoPod: a pod of the RuntimeClass cryo runs on the labelled
// node under the shim the installer put there, is checkpointed through
// the kubelet's API, and a pod whose image is the checkpoint carries on.
func testHelmCryoPod(c *k8sCluster, hn helmNode) *harness.PrivateRegistry {
	reg := harness.StartPrivateRegistry(c.t)
	c.kubectl("create", "secret", "docker-registry", pullSecret, "-n", nsApps, "--docker-server="+reg.Addr,
		"--docker-username="+harness.PrivateUser, "--docker-password="+harness.PrivatePassword)
	took := time.Now()
	ck := c.checkpointPodAt(reg, nsApps, "source", podOpts{}, reg.Addr+"/ckpt/helm:v1", 3)
	c.t.Logf("cryo pod checkpointed and pushed in %s", time.Since(took).Round(time.Millisecond))
	c.RunPod(appPod(nsApps, "restored", ck.ref, podOpts{pullSecret: pullSecret}))
	c.waitPod(nsApps, "restored", "Running")
	if shim := c.shimOf(hn); shim == "" {
		c.t.Errorf("no containerd-shim-cryo-v2 runs from %s", filepath.Join(hn.host, "usr/local/bin/cryo"))
	}
	c.WaitTicks(nsApps, "restored", 3)
	ticks := c.logTicks(nsApps, "restored")
	if ticks[0] <= ck.before || ticks[0] > ck.after+1 {
		c.t.Fatalf("restored pod's first tick %d; want one after %d (the checkpoint), at most %d", ticks[0], ck.before, ck.after+1)
	}
	c.t.Logf("restored under the installed runtime: ticks %d…%d (checkpoint after tick %d)", ticks[0], harness.LastOf(ticks), ck.before)
	c.kubectl("delete", "pod", "-n", nsApps, "restored", "--wait=true", "--timeout=2m")
	return reg
}

// plainPod is appPod under the node's default runtime (runc).
func plainPod(ns, name, image string) map[string]any {
	p := appPod(ns, name, image, podOpts{})
	delete(p["spec"].(map[string]any), "runtimeClassName")
	return p
}

// helmHost makes the node's directories for the installer: a prefix that
// holds someone else's tool, and an /etc/containerd without conf.d.
func (c *k8sCluster) helmHost() string {
	c.t.Helper()
	host := filepath.Join(c.dir, "host")
	mkdirAll(c.t, filepath.Join(host, "usr/local/bin"))
	mkdirAll(c.t, filepath.Join(host, "etc/containerd"))
	harness.WriteFile(c.t, filepath.Join(host, "usr/local/bin/other-tool"), "#!/bin/sh\necho not cryo's\n")
	return host
}

// helmValues writes the chart's values for the test's node: the imported
// image, the node's paths, its containerd and how to restart it, and the
// API server's address (there is no kube-proxy for the service address).
func (c *k8sCluster) helmValues(hn helmNode) string {
	c.t.Helper()
	port := c.apiURL[strings.LastIndex(c.apiURL, ":")+1:]
	v := map[string]any{
		"image": map[string]any{"repository": strings.Split(installerRef, ":")[0], "tag": "test", "pullPolicy": "Never"},
		"paths": map[string]any{"prefix": filepath.Join(hn.host, "usr/local"), "state": filepath.Join(hn.host, "var/lib/cryo/node-install")},
		"containerd": map[string]any{"config": filepath.Join(c.node.Dir, "config.toml"),
			"dropIn": filepath.Join(hn.host, "etc/containerd/conf.d/cryo.toml"), "socket": c.node.Socket,
			"restart": fmt.Sprintf("kill -TERM $(cat %s)", hn.pidFile)},
		"env": []any{map[string]string{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
			map[string]string{"name": "KUBERNETES_SERVICE_PORT", "value": port}},
		"terminationGracePeriodSeconds": 60,
		"retryInterval":                 "2s", // a failed install is tried again soon (k8s_helm_failed_test.go)
		// The kubelet runs in a mount namespace of its own (startKubelet):
		// the tmpfs of a service account token volume would not reach
		// containerd. The pod gets the same token (TokenRequest, for the
		// chart's service account) through a directory of the node instead.
		"serviceAccount":    map[string]any{"automountToken": false},
		"extraVolumes":      []any{map[string]any{"name": "token", "hostPath": map[string]any{"path": hn.token(), "type": "Directory"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}},
	}
	p := filepath.Join(c.dir, "values.json")
	harness.WriteFile(c.t, p, string(harness.MustJSON(c.t, v)))
	return p
}

// token is the node's directory that holds the installer's service
// account token.
func (hn helmNode) token() string { return filepath.Join(filepath.Dir(hn.host), "sa-token") }

// writeToken asks the API server for a token of the chart's service
// account and writes it, the CA and the namespace where a token volume
// would put them.
func (c *k8sCluster) writeToken(hn helmNode) {
	c.t.Helper()
	mkdirAll(c.t, hn.token())
	tok := c.kubectl("create", "token", helmDaemonSet, "-n", helmNamespace, "--duration=1h")
	ca, err := os.ReadFile(c.pki.caCert)
	if err != nil {
		c.t.Fatal(err)
	}
	harness.WriteFile(c.t, filepath.Join(hn.token(), "token"), strings.TrimSpace(tok))
	harness.WriteFile(c.t, filepath.Join(hn.token(), "ca.crt"), string(ca))
	harness.WriteFile(c.t, filepath.Join(hn.token(), "namespace"), helmNamespace)
}

// helm runs helm against the cluster, its caches in the test's directory.
func (c *k8sCluster) helm(helm string, args ...string) string {
	c.t.Helper()
	env := []string{"HELM_CACHE_HOME=" + filepath.Join(c.dir, "helm/cache"), "HELM_CONFIG_HOME=" + filepath.Join(c.dir, "helm/config"),
		"HELM_DATA_HOME=" + filepath.Join(c.dir, "helm/data"), "KUBECONFIG=" + c.kubeconfig}
	out, err := harness.RunErr(2*time.Minute, env, helm, args...)
	if err != nil {
		c.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// loadInstallerImage builds the installer image from bin/cryo as make
// installer-image does and imports it into CRI's namespace.
func (c *k8sCluster) loadInstallerImage() {
	c.t.Helper()
	c.loadInstallerImageAs(installerRef, "")
}

// loadInstallerImageAs builds and imports the installer image as ref,
// with criu (if not "") as the CRIU it ships.
func (c *k8sCluster) loadInstallerImageAs(ref, criu string) {
	c.t.Helper()
	c.loadInstallerImageFrom(ref, harness.CryoBin(c.t, "cryo"), criu)
}

// loadInstallerImageFrom builds and imports the installer image of the
// cryo binary bin as ref, with the cryo-k8s beside bin if there is one
// (a release built for the upgrade has none: the installer needs none).
func (c *k8sCluster) loadInstallerImageFrom(ref, bin, criu string) {
	c.t.Helper()
	archive := filepath.Join(c.dir, "installer-"+filepath.Base(strings.ReplaceAll(ref, ":", "-"))+".tar")
	args := []string{"-C", harness.RepoRoot(), "run", "./internal/installer/image", "-bin", bin, "-name", ref, "-o", archive}
	if k8s := filepath.Join(filepath.Dir(bin), "cryo-k8s"); harness.FileExists(k8s) {
		args = append(args, "-k8s", k8s)
	}
	if criu != "" {
		args = append(args, "-criu", criu)
	}
	out, err := harness.RunErr(5*time.Minute, []string{"GOFLAGS=-mod=mod"}, "go", args...)
	if err != nil {
		c.t.Fatalf("build the installer image: %v\n%s", err, out)
	}
	c.node.CtrIn(harness.CRINamespace, "images", "import", archive)
	harness.WaitFor(c.t, 10*time.Second, "CRI to list the installer image", func() bool { return c.node.ImageKnown(ref) })
}

// playDaemonSetController creates the installer DaemonSet's pod on the
// node from its template, owned by it, as the DaemonSet controller does.
func (c *k8sCluster) playDaemonSetController() {
	c.t.Helper()
	c.playDaemonSetControllerOf(helmDaemonSet, helmDaemonSetPod(helmDaemonSet))
}

// helmDaemonSetPod is the name the test gives the pod of DaemonSet name.
func helmDaemonSetPod(name string) string { return name + "-node" }

// playDaemonSetControllerOf creates the pod of the release's DaemonSet
// name on the node, named pod.
func (c *k8sCluster) playDaemonSetControllerOf(name, pod string) {
	c.t.Helper()
	var ds struct {
		Metadata struct{ Name, UID string }
		Spec     struct {
			Template struct {
				Metadata map[string]any `json:"metadata"`
				Spec     map[string]any `json:"spec"`
			}
		}
	}
	if err := c.getJSON("/apis/apps/v1/namespaces/"+helmNamespace+"/daemonsets/"+name, &ds); err != nil {
		c.t.Fatalf("get the chart's DaemonSet %s: %v", name, err)
	}
	meta := ds.Spec.Template.Metadata
	meta["name"], meta["namespace"] = pod, helmNamespace
	meta["ownerReferences"] = []any{map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds.Metadata.Name,
		"uid": ds.Metadata.UID, "controller": true, "blockOwnerDeletion": true}}
	spec := ds.Spec.Template.Spec
	spec["nodeName"] = k8sNodeName
	c.RunPod(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

// playGarbageCollector deletes the pod of the deleted DaemonSet and waits
// until it is gone: its installer has then reverted the node.
func (c *k8sCluster) playGarbageCollector() {
	c.t.Helper()
	pod := helmDaemonSet + "-node"
	if _, err := c.kubectlErr("get", "daemonset", "-n", helmNamespace, helmDaemonSet); err == nil {
		c.t.Fatal("the DaemonSet is still there after helm uninstall")
	}
	c.kubectl("delete", "pod", "-n", helmNamespace, pod, "--wait=false")
	// Its log, read until the pod is gone: the last one read says how it
	// stopped.
	var logs string
	harness.WaitFor(c.t, 3*time.Minute, "the installer's pod to go", func() bool {
		if out, err := c.kubectlErr("logs", "-n", helmNamespace, pod); err == nil {
			logs = out
		}
		_, err := c.kubectlErr("get", "pod", "-n", helmNamespace, pod)
		return err != nil
	})
	c.t.Logf("installer log:\n%s", logs)
}

// nodeLabels are the node's labels.
func (c *k8sCluster) nodeLabels() map[string]string {
	c.t.Helper()
	var node struct {
		Metadata struct{ Labels map[string]string }
	}
	if err := c.getJSON("/api/v1/nodes/"+k8sNodeName, &node); err != nil {
		c.t.Fatalf("get node: %v", err)
	}
	return node.Metadata.Labels
}

// waitNodeLabel waits for cryo.io/runtime=want; a node labelled failed
// fails the test with the installer's log and the node's events.
func (c *k8sCluster) waitNodeLabel(want string) {
	c.t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		got := c.nodeLabels()["cryo.io/runtime"]
		if got == want {
			return
		}
		if got == "failed" || time.Now().After(deadline) {
			logs, _ := c.kubectlErr("logs", "-n", helmNamespace, helmDaemonSet+"-node")
			pod, _ := c.kubectlErr("describe", "pod", "-n", helmNamespace, helmDaemonSet+"-node")
			c.t.Fatalf("node cryo.io/runtime=%q, want %q\ninstaller log:\n%s\n%s\nevents:\n%s", got, want, logs, pod, c.events("default", k8sNodeName))
		}
		time.Sleep(time.Second)
	}
}

// containerdPid is the pid of the node's containerd now.
func (c *k8sCluster) containerdPid(hn helmNode) int {
	c.t.Helper()
	data, err := os.ReadFile(hn.pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid == 0 {
		c.t.Fatalf("containerd's pid file %s: %v %q", hn.pidFile, err, data)
	}
	return pid
}

// checkInstalled: containerd was restarted, the pod of the stock runtime
// kept running in the same container, and the drop-in and the import are
// in place.
func (c *k8sCluster) checkInstalled(hn helmNode, pid int, bystander string) {
	c.t.Helper()
	if c.containerdPid(hn) == pid {
		c.t.Errorf("containerd was not restarted by the install (pid %d)", pid)
	}
	if got := c.criContainers(nsApps, "bystander"); len(got) != 1 || got[0].Id != bystander || got[0].State.String() != "CONTAINER_RUNNING" {
		c.t.Errorf("the bystander pod's container after the restart: %v, want %s running", got, bystander)
	}
	c.WaitTicks(nsApps, "bystander", 2)
	cfg, _ := os.ReadFile(filepath.Join(c.node.Dir, "config.toml"))
	harness.WantIn(c.t, string(cfg), fmt.Sprintf("imports = [%q]", filepath.Join(hn.host, "etc/containerd/conf.d/cryo.toml")))
	drop, _ := os.ReadFile(filepath.Join(hn.host, "etc/containerd/conf.d/cryo.toml"))
	harness.WantIn(c.t, string(drop), "runtime_type = 'io.containerd.cryo.v2'")
	c.t.Logf("drop-in:\n%s", drop)
}

// shimOf is the pid of a containerd-shim-cryo-v2 running from the
// installed binary, or "".
func (c *k8sCluster) shimOf(hn helmNode) string {
	installed := filepath.Join(hn.host, "usr/local/bin/cryo")
	exes, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, e := range exes {
		if exe, err := os.Readlink(e); err != nil || exe != installed {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(e), "cmdline"))
		if strings.Contains(string(cmd), "containerd-shim-cryo-v2") {
			return filepath.Base(filepath.Dir(e))
		}
	}
	return ""
}

// helmSnapshot is every path the installer may touch, with its mode and
// bytes: the node's directory and containerd's configuration file.
func (c *k8sCluster) helmSnapshot(hn helmNode) map[string]string {
	c.t.Helper()
	out := map[string]string{}
	add := func(p string, fi os.FileInfo) {
		v := fi.Mode().String()
		if fi.Mode()&os.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			v += " -> " + l
		} else if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			v += fmt.Sprintf(" %d bytes sha256:%x", len(b), sha256.Sum256(b))
		}
		out[p] = v
	}
	_ = filepath.Walk(hn.host, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			add(p, fi)
		}
		return err
	})
	cfg := filepath.Join(c.node.Dir, "config.toml")
	fi, err := os.Lstat(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	add(cfg, fi)
	return out
}

// checkSame fails for each path whose mode or bytes differ.
func (c *k8sCluster) checkSame(before, after map[string]string) {
	c.t.Helper()
	for p, v := range before {
		if after[p] != v {
			c.t.Errorf("%s after uninstall:\n%q\nbefore install:\n%q", p, after[p], v)
		}
	}
	for p, v := range after {
		if _, ok := before[p]; !ok {
			c.t.Errorf("%s left by uninstall: %q", p, v)
		}
	}
}
