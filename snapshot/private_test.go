package snapshot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMakePrivate(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, nil, 0o644)
	os.Chmod(outside, 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("secret"), 0o644)
	os.WriteFile(filepath.Join(dir, "sub", "f"), nil, 0o666)
	os.Symlink(outside, filepath.Join(dir, "link"))
	os.Chmod(dir, 0o755)
	if err := MakePrivate(dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{".": 0o700, "sub": 0o700, "pages-1.img": 0o600, "sub/f": 0o600} {
		if st, _ := os.Stat(filepath.Join(dir, name)); st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), want)
		}
	}
	if st, _ := os.Stat(outside); st.Mode().Perm() != 0o644 {
		t.Errorf("a symlink was followed out of the directory: %v", st.Mode().Perm())
	}
}
