package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestImageStoreRefAndRemove: `cryo image build DIR 'BAD REF'` is refused
// with exit 1 and a remedy before the store is even made, and `cryo image rm`
// of the only tag leaves index.json without a descriptor and no blob.
func TestImageStoreRefAndRemove(t *testing.T) {
	harness.RequireRoot(t)
	p := bareStartCounter(t)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--leave-running")
	store := filepath.Join(t.TempDir(), "store")

	_, stderr, code := harness.CryoSplit(t, nil, "image", "build", img, "BAD REF", "--store", store)
	t.Logf("exit %d: %s", code, stderr)
	if code != 1 || !strings.Contains(stderr, "not a valid image reference") || !strings.Contains(stderr, "remedy: name the image as a registry would") {
		t.Fatalf("build 'BAD REF': exit %d, want 1 with the reason and a remedy:\n%s", code, stderr)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Fatalf("the refused build made the store %s (%v)", store, err)
	}

	ref := "localhost/ckpt/store-rm:1"
	harness.BareCryo(t, nil, "image", "build", img, ref, "--store", store, "-q")
	harness.BareCryo(t, nil, "image", "rm", ref, "--store", store)
	b, err := os.ReadFile(filepath.Join(store, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct{ Manifests []json.RawMessage }
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.Manifests) != 0 {
		t.Fatalf("index.json after image rm keeps %d descriptors (%v):\n%s", len(idx.Manifests), err, b)
	}
	if blobs, _ := os.ReadDir(filepath.Join(store, "blobs", "sha256")); len(blobs) != 0 {
		t.Fatalf("%d blobs left after image rm", len(blobs))
	}
}
