package k8s

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// blockDropIn puts a plain file where the drop-in's directory goes; the
// returned func removes it.
func (c *k8sCluster) blockDropIn(hn helmNode) func() {
	c.t.Helper()
	p := filepath.Join(hn.host, "etc/containerd/conf.d")
	harness.WriteFile(c.t, p, "not a directory\n")
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
	harness.WaitFor(c.t, 3*time.Minute, "cryo.io/runtime=failed", func() bool { return c.nodeLabels()["cryo.io/runtime"] == "failed" })
	c.t.Logf("node labelled cryo.io/runtime=failed %s after the installer started", time.Since(took).Round(time.Millisecond))
	var reason string
	harness.WaitFor(c.t, 30*time.Second, "the CryoInstallFailed event on the node", func() bool {
		for _, l := range strings.Split(c.events("default", k8sNodeName), "\n") {
			if strings.HasPrefix(l, "CryoInstallFailed: ") {
				reason = l
			}
		}
		return reason != ""
	})
	harness.WantIn(c.t, reason, "conf.d/cryo.toml", "not a directory", "remedy: move aside the file")
	c.t.Logf("the node's event: %s", reason)
	testHelmKeptOff(c)

	harness.WaitFor(c.t, time.Minute, "the installer to try again and fail for the same cause", func() bool {
		out, err := c.kubectlErr("logs", "-n", helmNamespace, helmDaemonSet+"-node")
		return err == nil && strings.Contains(out, "install failed again")
	})
	unblock()
	took = time.Now()
	// The installer tries again every retryInterval (2 s here): the same
	// pod labels the node ready once the cause is gone.
	harness.WaitFor(c.t, 2*time.Minute, "the installer's retry to label the node ready", func() bool {
		return c.nodeLabels()["cryo.io/runtime"] == "ready"
	})
	c.t.Logf("cause fixed: cryo.io/runtime=ready %s later, same pod", time.Since(took).Round(time.Millisecond))
	logs := c.kubectl("logs", "-n", helmNamespace, helmDaemonSet+"-node")
	harness.WantIn(c.t, logs, "trying the install again (--retry 2s)", "labelled node "+k8sNodeName+" cryo.io/runtime=ready")
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
	c.RunPod(appPod(nsApps, "kept-off", c.app, podOpts{}))
	sel := c.kubectl("get", "pod", "-n", nsApps, "kept-off", "-o", "jsonpath={.spec.nodeSelector}")
	harness.WantIn(c.t, sel, `"cryo.io/runtime":"ready"`)
	var status struct {
		Status struct{ Phase, Reason, Message string }
	}
	harness.WaitFor(c.t, time.Minute, "the kubelet to refuse the cryo pod on the failed node", func() bool {
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
