package ctrd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/ociimage"
)

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
