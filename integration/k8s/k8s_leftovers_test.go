package k8s

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// k8sHostState is what the cluster could change on the host, read before
// it starts and again after its cleanup.
type k8sHostState struct {
	Sysctls    map[string]string
	KubeChains int             // lines naming a KUBE- chain in iptables-save and ip6tables-save
	VarLog     map[string]bool // /var/log/containers and /var/log/pods exist
}

func hostState(t testing.TB) k8sHostState {
	t.Helper()
	s := k8sHostState{Sysctls: map[string]string{}, VarLog: map[string]bool{}}
	for _, k := range kubeletSysctls {
		v, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		s.Sysctls[k] = strings.TrimSpace(string(v))
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, _ := harness.RunErr(harness.ImgTimeout, nil, save)
		s.KubeChains += strings.Count(out, ":KUBE-")
	}
	for _, d := range []string{"/var/log/containers", "/var/log/pods"} {
		_, err := os.Stat(d)
		s.VarLog[d] = err == nil
	}
	return s
}

// checkGone runs after every other cleanup of the cluster.
func (c *k8sCluster) checkGone(before k8sHostState) {
	t := c.t
	if after := hostState(t); !reflect.DeepEqual(before, after) {
		t.Errorf("the cluster changed the host: before %+v, after %+v", before, after)
	}
	if c.dir == "" {
		return
	}
	if procs := procsNaming(c.dir, c.bin); len(procs) > 0 {
		t.Errorf("processes of the cluster left running: %s", strings.Join(procs, "; "))
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, c.dir) {
			t.Errorf("mount left behind: %s", line)
		}
	}
	if c.node != nil {
		left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", c.node.Cgroup))
		if len(left) > 0 {
			t.Errorf("pod cgroups left behind: %v", left)
		}
	}
}

// procsNaming lists the processes whose command line holds one of words.
func procsNaming(words ...string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmd) == 0 {
			continue
		}
		line := strings.ReplaceAll(string(cmd), "\x00", " ")
		for _, w := range words {
			if strings.Contains(line, w) {
				found = append(found, e.Name()+": "+line)
				break
			}
		}
	}
	return found
}
