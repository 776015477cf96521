package ociimage

import (
	"testing"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// TestContainerdCheckpointName: ctr's default reference names the
// container; any other reference does not, and cryo's manifest (the
// shim's) does; a bare process's manifest names none.
func TestContainerdCheckpointName(t *testing.T) {
	for _, c := range []struct{ ref, manifestID, want string }{
		{"containerd.io/checkpoint/web:01-02-2026-15:04", "other", "web"},
		{"localhost/ckpt/ux-ck:1", "app", "app"},
		{"localhost/ckpt/ux-ck:1", "pid 42", "ux-ck"},
		{"localhost/ckpt/ux-ck:1", "", "ux-ck"},
	} {
		ck := &ctrdCheckpoint{ref: c.ref}
		ck.fillMeta(&manifest.Manifest{ContainerID: c.manifestID})
		if ck.meta.Name != c.want || ck.meta.ID != c.want {
			t.Errorf("%s with manifest id %q: name %q, id %q; want %q", c.ref, c.manifestID, ck.meta.Name, ck.meta.ID, c.want)
		}
	}
}
