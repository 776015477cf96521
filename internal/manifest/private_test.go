package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
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

// An existing empty directory of another user becomes ours and 0700: its
// owner must not be able to replace what cryo writes into it.
func TestPrivateDirTakesOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the directory to another user")
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	os.Mkdir(dir, 0o777)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := PrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Mode&0o777 != 0o700 {
		t.Fatalf("uid %d mode %o, want 0 and 700", st.Uid, st.Mode&0o777)
	}
}

// A symlink is refused, its target left as it was.
func TestPrivateDirRefusesSymlink(t *testing.T) {
	target := t.TempDir()
	os.Chmod(target, 0o755)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(target, link)
	if err := PrivateDir(link); !errors.Is(err, ErrNotPrivate) {
		t.Fatalf("symlink: %v, want ErrNotPrivate", err)
	}
	if st, _ := os.Stat(target); st.Mode().Perm() != 0o755 {
		t.Fatalf("the symlink's target was changed: %v", st.Mode().Perm())
	}
}
