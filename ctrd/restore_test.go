package ctrd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/snapshot/ociimage"
)

func TestRenameCgroup(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{"/ns/app", "/other/new"},
		{"system.slice:cri:app", "system.slice:cri:new"},
		{"/custom/deep/path", "/custom/deep/path"},
	} {
		s := &rspec.Spec{Linux: &rspec.Linux{CgroupsPath: c.path}}
		renameCgroup(s, ociimage.ContainerdMeta{ContainerConfig: metadata.ContainerConfig{ID: "app"}, Namespace: "ns"}, "other", "new")
		if s.Linux.CgroupsPath != c.want {
			t.Errorf("%s → %s, want %s", c.path, s.Linux.CgroupsPath, c.want)
		}
	}
}

// TestRestoreRefusesOtherKinds: a Podman checkpoint is refused before
// anything reaches containerd.
func TestRestoreRefusesOtherKinds(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.dump"), []byte(`{"id":"app","cryoKind":"podman"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Restore(context.Background(), dir, RestoreOptions{Options: Options{Address: filepath.Join(dir, "no.sock")}})
	if !errors.Is(err, ociimage.ErrNotCheckpointImage) {
		t.Fatalf("got %v, want %v", err, ociimage.ErrNotCheckpointImage)
	}
}
