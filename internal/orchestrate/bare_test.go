package orchestrate

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

func TestPrepareDirNarrowsExisting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "img")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // whatever the umask
	if err := prepareDir(dir); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("mode %v, want 0700", st.Mode().Perm())
	}
}

func TestPrepareDirRefusesNonEmpty(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(dir, ".ssh", "id_rsa"), []byte("secret"), 0o600)
	os.Chmod(dir, 0o755)
	err := prepareDir(dir)
	if !errors.Is(err, ErrDirNotEmpty) {
		t.Fatalf("err = %v, want ErrDirNotEmpty", err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o755 {
		t.Errorf("a refused directory was changed: mode %v", st.Mode().Perm())
	}
	os.WriteFile(filepath.Join(dir, manifest.ManifestName), []byte("{}"), 0o600)
	if err := prepareDir(dir); !errors.Is(err, ErrDirInUse) {
		t.Fatalf("err = %v, want ErrDirInUse", err)
	}
}
