package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/lock"
)

// wantNothingLeft: after a cut restore of container id (in containerd
// namespace ns), nothing of it stands in the way of the next one or of
// the node: no entry in the restore's work directory work ("": not
// checked), no lock of the container held, no runc container under the
// runc service's root, no mount whose path names the container.
func wantNothingLeft(t *testing.T, ns, id, work, after string) {
	t.Helper()
	if work != "" {
		wantEmpty(t, work, after)
	}
	_, l, err := lock.Target(context.Background(), config.FromEnv().LockDir, "leftover check", id)
	if err != nil {
		t.Errorf("the lock of %s is held after %s: %v", id, after, err)
	} else {
		l.Release()
	}
	// The runc service's default root (containerd's runc.v2 shim): a
	// container it created and nobody deleted stays there, "created".
	root := filepath.Join("/run/containerd/runc", ns)
	if out, err := runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "state", id); err == nil {
		t.Errorf("runc container %s is left after %s:\n%s", id, after, out)
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, id) {
			t.Errorf("a mount of %s is left after %s: %s", id, after, line)
		}
	}
}

// wantNoCopy: no copy of a checkpoint that containerd unpacked for the
// shim is left in tmp, containerd's TMPDIR (it holds the processes'
// memory).
func wantNoCopy(t *testing.T, tmp, after string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(tmp, "ctrd-checkpoint*"))
	for _, dir := range left {
		t.Errorf("containerd's copy of the checkpoint %s is left after %s", dir, after)
	}
}
