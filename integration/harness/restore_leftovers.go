package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/lock"
)

// WantNothingLeft: after a cut restore of container id (in containerd
// namespace ns), nothing of it stands in the way of the next one or of
// the node: no entry in the restore's work directory work ("": not
// checked), no lock of the container held, no runc container under the
// runc service's root, no mount whose path names the container. It gives
// containerd's cleanup of a dead shim, which runs on its own, 10 s.
func WantNothingLeft(t *testing.T, ns, id, work, after string) {
	t.Helper()
	var left []string
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if left = leftovers(ns, id, work); len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			break
		}
	}
	for _, l := range left {
		t.Errorf("%s is left after %s", l, after)
	}
}

// leftovers are what a restore of container id left.
func leftovers(ns, id, work string) []string {
	var left []string
	if work != "" {
		entries, _ := os.ReadDir(work)
		for _, e := range entries {
			left = append(left, "the work directory "+filepath.Join(work, e.Name()))
		}
	}
	if l, err := lock.Target(config.FromEnv().LockDir, "leftover check", id); err != nil {
		left = append(left, "a held lock of "+id+" ("+err.Error()+")")
	} else {
		l.Release()
	}
	// The runc service's default root (containerd's runc.v2 shim): a
	// container it created and nobody deleted stays there.
	root := filepath.Join("/run/containerd/runc", ns)
	if out, err := RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "state", id); err == nil {
		left = append(left, "runc container "+id+":\n"+out)
	}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, id) {
			left = append(left, "a mount of "+id+": "+line)
		}
	}
	return left
}
