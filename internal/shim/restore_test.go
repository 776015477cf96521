package shim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"

	"github.com/cryo-gpu/cryo/internal/criu"
)

// A checkpoint with a tcp-stream image puts tcp-established into the
// bundle's CRIU configuration until the restore is over; one without
// leaves the bundle alone.
func TestRestoreTCP(t *testing.T) {
	ctx := context.Background()
	bundle, ckpt := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"ociVersion":"1.0.2"}`), 0o644)
	r := &taskv3.CreateTaskRequest{ID: "c", Bundle: bundle, Checkpoint: ckpt}
	conf := filepath.Join(bundle, criu.ConfName)

	if tcp, err := restoreTCP(ctx, r); tcp || err != nil {
		t.Fatalf("no connection: %v %v", tcp, err)
	}
	if _, err := os.Stat(conf); err == nil {
		t.Fatal("CRIU configuration written for a checkpoint without connections")
	}

	os.WriteFile(filepath.Join(ckpt, "tcp-stream-5a.img"), nil, 0o600)
	if tcp, err := restoreTCP(ctx, r); !tcp || err != nil {
		t.Fatalf("one connection: %v %v", tcp, err)
	}
	if data, _ := os.ReadFile(conf); !hasLine(string(data), criu.TCPEstablished) {
		t.Fatalf("configuration %q", data)
	}
	if spec, _ := os.ReadFile(filepath.Join(bundle, "config.json")); !strings.Contains(string(spec), conf) {
		t.Fatalf("spec does not name the configuration: %s", spec)
	}
	endRestoreTCP(ctx, r.ID, bundle)
	if data, _ := os.ReadFile(conf); hasLine(string(data), criu.TCPEstablished) {
		t.Fatalf("after the restore: %q", data)
	}
}

func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}
