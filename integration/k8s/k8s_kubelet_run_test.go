package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// kubeletSysctls are the kernel settings a kubelet without
// protectKernelDefaults sets on its host (pkg/kubelet/cm's
// setupKernelTunables). The test's kubelet writes them into copies.
var kubeletSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
	"kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// kubeletConfig is the KubeletConfiguration (JSON is YAML). Pods' cgroups
// go under the CRI node's cgroup parent, which its cleanup removes: no QoS
// tree (cgroupsPerQOS false, which requires no enforced allocatable), and
// cgroup v1 accepted, as this VM's hybrid hierarchy needs. No iptables
// chains (makeIPTablesUtilChains false), no static pods, no read-only or
// healthz port, eviction and image GC out of the way of a shared disk. The
// pods' sandbox image is containerd's (pinned_images.sandbox, the CRI
// node's imported pause image): kubelet 1.37 has no flag for it.
func (c *k8sCluster) KubeletConfig() map[string]any {
	return map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
		"address": "127.0.0.1", "port": c.kubeletPort, "readOnlyPort": 0, "healthzPort": 0,
		"tlsCertFile": c.pki.cert("kubelet"), "tlsPrivateKeyFile": c.pki.key("kubelet"),
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": c.pki.caCert},
		},
		"authorization":            map[string]any{"mode": "Webhook"},
		"containerRuntimeEndpoint": "unix://" + c.node.Socket,
		"cgroupDriver":             "cgroupfs", "cgroupRoot": c.node.Cgroup,
		"cgroupsPerQOS": false, "enforceNodeAllocatable": []string{}, "failCgroupV1": false,
		"failSwapOn": false, "makeIPTablesUtilChains": false,
		"podLogsDir":                  filepath.Join(c.dir, "pod-logs"),
		"featureGates":                map[string]bool{"ContainerCheckpoint": true, "KubeletEnsureSecretPulledImages": true},
		"evictionHard":                map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
		"imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
		"runtimeRequestTimeout": harness.CRICall.String(), "registerNode": true,
	}
}

// startKubelet runs the kubelet in a mount namespace of its own whose
// mounts follow the host's (slave): what it mounts dies with it, its
// kernel settings land in copies bound over /proc/sys, and the
// /var/log/containers links it keeps for log collectors land in the
// test's directory, not the host's.
func (c *k8sCluster) startKubelet() {
	c.t.Helper()
	addr := testsupport.FreeAddr(c.t)
	c.kubeletPort, _ = strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	cfg := filepath.Join(c.dir, "kubelet.json")
	harness.WriteFile(c.t, cfg, string(harness.MustJSON(c.t, c.KubeletConfig())))
	kubeconfig := c.writeKubeconfig("kubelet.kubeconfig", "kubelet-client")
	root := filepath.Join(c.dir, "kubelet")
	p := startK8sProc(c.t, c.dir, "kubelet", append([]string{"unshare", "--mount", "--propagation", "slave", "--",
		"/bin/sh", "-ec", c.kubeletShell(), "kubelet", filepath.Join(c.bin, "kubelet")},
		"--config="+cfg, "--kubeconfig="+kubeconfig, "--root-dir="+root, "--cert-dir="+filepath.Join(root, "pki"),
		"--hostname-override="+k8sNodeName, "--v=2")...)
	p.waitUp(c.t, 2*time.Minute, func() error {
		ready, err := c.nodeReady()
		if err == nil && !ready {
			err = fmt.Errorf("node %s registered, not Ready yet", k8sNodeName)
		}
		return err
	})
	c.kubelet = p
}

// kubeletShell is the script that prepares the kubelet's mount namespace
// and then becomes the kubelet ("$@").
func (c *k8sCluster) kubeletShell() string {
	var b strings.Builder
	masks := filepath.Join(c.dir, "sysctl")
	mkdirAll(c.t, masks)
	for _, s := range kubeletSysctls {
		cur, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			c.t.Fatalf("read the kubelet's kernel setting %s: %v", s, err)
		}
		mask := filepath.Join(masks, strings.ReplaceAll(s, "/", "."))
		harness.WriteFile(c.t, mask, string(cur))
		fmt.Fprintf(&b, "mount --bind %s /proc/sys/%s\n", mask, s)
	}
	varlog := filepath.Join(c.dir, "varlog")
	mkdirAll(c.t, varlog)
	fmt.Fprintf(&b, "mount --bind %s /var/log\nexec \"$@\"\n", varlog)
	return b.String()
}

// nodeReady reports whether the node has registered and says Ready (CRI's
// runtime and network up).
func (c *k8sCluster) nodeReady() (bool, error) {
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status string }
		}
	}
	if err := c.getJSON("/api/v1/nodes/"+k8sNodeName, &node); err != nil {
		return false, err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == "Ready" {
			return cond.Status == "True", nil
		}
	}
	return false, nil
}

func mkdirAll(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}
