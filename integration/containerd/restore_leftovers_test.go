package containerd

import (
	"path/filepath"
	"testing"
)

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
