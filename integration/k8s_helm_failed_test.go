package integration

// The failed-label path of the chart's installer, on TestKubeletHelm's
// cluster: a node where the install cannot write containerd's drop-in (a
// plain file stands where the directory conf.d must be: a real ENOTDIR
// from the kernel, not a mock) is labelled cryo.io/runtime=failed, with
// the installer's error in a Warning event on the node; a pod of the
// RuntimeClass cryo bound to it is refused by the kubelet (the
// RuntimeClass's nodeSelector, which the API server's RuntimeClass
// admission merged into the pod, does not match the node); once the cause
// is gone, the DaemonSet's next pod installs and labels the node ready.

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// blockDropIn puts a plain file where the drop-in's directory goes; the
// returned func removes it.
func (c *k8sCluster) blockDropIn(hn helmNode) func() {
	c.t.Helper()
	p := filepath.Join(hn.host, "etc/containerd/conf.d")
	writeFile(c.t, p, "not a directory\n")
	return func() {
		if err := os.Remove(p); err != nil {
			c.t.Fatal(err)
		}
	}
}

// testHelmFailed runs once the DaemonSet's pod started on a node whose
// drop-in directory is blocked; it leaves the node labelled ready after
// fixing the cause (unblock) and replacing the pod.
func testHelmFailed(c *k8sCluster, unblock func()) {
	took := time.Now()
	waitFor(c.t, 3*time.Minute, "cryo.io/runtime=failed", func() bool { return c.nodeLabels()["cryo.io/runtime"] == "failed" })
	c.t.Logf("node labelled cryo.io/runtime=failed %s after the installer started", time.Since(took).Round(time.Millisecond))
	var reason string
	waitFor(c.t, 30*time.Second, "the CryoInstallFailed event on the node", func() bool {
		for _, l := range strings.Split(c.events("default", k8sNodeName), "\n") {
			if strings.HasPrefix(l, "CryoInstallFailed: ") {
				reason = l
			}
		}
		return reason != ""
	})
	wantIn(c.t, reason, "conf.d/cryo.toml", "not a directory", "remedy: move aside the file")
	c.t.Logf("the node's event: %s", reason)
	testHelmKeptOff(c)

	unblock()
	took = time.Now()
	c.kubectl("delete", "pod", "-n", helmNamespace, helmDaemonSet+"-node", "--wait=true", "--timeout=2m")
	c.playDaemonSetController()
	// The new pod labels the node installing before it installs.
	waitFor(c.t, 3*time.Minute, "the new installer to take the failed label off", func() bool {
		return c.nodeLabels()["cryo.io/runtime"] != "failed"
	})
	c.waitNodeLabel("ready")
	c.t.Logf("cause fixed, installer pod replaced: cryo.io/runtime=ready %s later", time.Since(took).Round(time.Millisecond))
	for _, l := range strings.Split(c.events("default", k8sNodeName), "\n") {
		if strings.HasPrefix(l, "CryoReady: ") {
			return
		}
	}
	c.t.Errorf("no CryoReady event on the node after the fix:\n%s", c.events("default", k8sNodeName))
}

// testHelmKeptOff: a cryo pod bound to the failed node carries the
// RuntimeClass's nodeSelector, and the kubelet refuses it (NodeAffinity):
// it never runs there.
func testHelmKeptOff(c *k8sCluster) {
	c.runPod(appPod(nsApps, "kept-off", c.app, podOpts{}))
	sel := c.kubectl("get", "pod", "-n", nsApps, "kept-off", "-o", "jsonpath={.spec.nodeSelector}")
	wantIn(c.t, sel, `"cryo.io/runtime":"ready"`)
	var status struct {
		Status struct{ Phase, Reason, Message string }
	}
	waitFor(c.t, time.Minute, "the kubelet to refuse the cryo pod on the failed node", func() bool {
		if err := c.getJSON("/api/v1/namespaces/"+nsApps+"/pods/kept-off", &status); err != nil {
			c.t.Fatal(err)
		}
		return status.Status.Phase == "Failed"
	})
	if status.Status.Reason != "NodeAffinity" || c.pod(nsApps, "kept-off").everRan() {
		c.t.Errorf("the cryo pod on the failed node: %+v; want Failed, NodeAffinity, never run", status.Status)
	}
	c.t.Logf("cryo pod on the failed node: %s %s: %s", status.Status.Phase, status.Status.Reason, status.Status.Message)
	c.kubectl("delete", "pod", "-n", nsApps, "kept-off", "--wait=true", "--timeout=1m")
}
