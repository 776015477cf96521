package integration

// The failed-label path of the chart's installer, on TestKubeletHelm's
// cluster: a node where the install cannot write containerd's drop-in (a
// plain file stands where the directory conf.d must be: a real ENOTDIR
// from the kernel, not a mock) is labelled cryo.io/runtime=failed, with
// the installer's error in a Warning event on the node; a pod of the
// RuntimeClass cryo bound to it is refused by the kubelet (the
// RuntimeClass's nodeSelector, which the API server's RuntimeClass
// admission merged into the pod, does not match the node); the installer
// tries again every retryInterval, with no new event for the same cause,
// and once the cause is gone it labels the node ready, in the same pod.

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
// fixing the cause (unblock).
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

	waitFor(c.t, time.Minute, "the installer to try again and fail for the same cause", func() bool {
		out, err := c.kubectlErr("logs", "-n", helmNamespace, helmDaemonSet+"-node")
		return err == nil && strings.Contains(out, "install failed again")
	})
	unblock()
	took = time.Now()
	// The installer tries again every retryInterval (2 s here): the same
	// pod labels the node ready once the cause is gone.
	waitFor(c.t, 2*time.Minute, "the installer's retry to label the node ready", func() bool {
		return c.nodeLabels()["cryo.io/runtime"] == "ready"
	})
	c.t.Logf("cause fixed: cryo.io/runtime=ready %s later, same pod", time.Since(took).Round(time.Millisecond))
	logs := c.kubectl("logs", "-n", helmNamespace, helmDaemonSet+"-node")
	wantIn(c.t, logs, "trying the install again (--retry 2s)", "labelled node "+k8sNodeName+" cryo.io/runtime=ready")
	var failed, ready int
	for _, l := range strings.Split(c.events("default", k8sNodeName), "\n") {
		switch {
		case strings.HasPrefix(l, "CryoInstallFailed: "):
			failed++
		case strings.HasPrefix(l, "CryoReady: "):
			ready++
		}
	}
	if failed != 1 || ready != 1 {
		c.t.Errorf("events on the node: %d CryoInstallFailed, %d CryoReady; want one of each (one per cause):\n%s",
			failed, ready, c.events("default", k8sNodeName))
	}
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
