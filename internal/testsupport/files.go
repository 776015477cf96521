package testsupport

import (
	"os"
	"path/filepath"
	"testing"
)

// CopyFiles copies every file of the directory src, which holds no
// directory, into the existing directory dst, readable by their owner only:
// a fixture's CRIU images, for a test that changes or adds to them.
func CopyFiles(t testing.TB, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
