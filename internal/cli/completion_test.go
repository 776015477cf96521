package cli

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
)

// The references come from index.json's ref.name annotations, sorted and
// once each; a missing or damaged index has none.
func TestStoreRefs(t *testing.T) {
	root := t.TempDir()
	if refs := storeRefs(root); len(refs) != 0 {
		t.Fatalf("no index: %v", refs)
	}
	idx := `{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"b:1"}},{"annotations":{"org.opencontainers.image.ref.name":"a:1"}},{},{"annotations":{"org.opencontainers.image.ref.name":"a:1"}}]}`
	os.WriteFile(filepath.Join(root, "index.json"), []byte(idx), 0o600)
	if refs := storeRefs(root); !slices.Equal(refs, []string{"a:1", "b:1"}) {
		t.Fatalf("refs %v", refs)
	}
	os.WriteFile(filepath.Join(root, "index.json"), []byte("{"), 0o600)
	if refs := storeRefs(root); len(refs) != 0 {
		t.Fatalf("damaged index: %v", refs)
	}
}

// Every command that takes pids or references completes them.
func TestCompletionsRegistered(t *testing.T) {
	root := newApp(config.Config{}).newRoot()
	for _, path := range [][]string{{"cuda", "state"}, {"cuda", "suspend"}, {"image", "rm"}, {"image", "restore"}, {"inspect"}} {
		c, _, err := root.Find(path)
		if err != nil || c.ValidArgsFunction == nil {
			t.Errorf("%v: no completion (%v)", path, err)
		}
	}
}
