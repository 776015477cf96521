package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cryo-gpu/cryo/internal/report"
)

// A checkpoint holds process memory, secrets included, so its directories
// are the owner's alone and its files readable by the owner only. CRIU and
// runc create files with their own umask (0644 is usual), and a directory
// given by the user may already exist with wider modes: MakePrivate closes
// both after the fact.
const (
	PrivateDirMode  fs.FileMode = 0o700
	PrivateFileMode fs.FileMode = 0o600
)

// PrivateDir creates dir (and missing parents) owner-only, and narrows an
// existing dir to 0700, so that files written into it afterwards with a
// wider umask are out of reach from the start. An existing dir owned by
// another user becomes ours: its owner could otherwise replace the
// manifest or the images once written. One that cannot be made ours (not
// root, a filesystem that squashes root) is refused with
// ErrNotPrivate, as is a symlink.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, PrivateDirMode); err != nil {
		return fmt.Errorf("create image directory %s: %w", dir, err)
	}
	// Through one descriptor opened without following a symlink, so that
	// the directory checked is the one changed.
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return report.WithRemedy(fmt.Errorf("image directory %s: %w", dir, errors.Join(ErrNotPrivate, err)), "give a directory, not a symlink")
	}
	defer f.Close()
	if err := ownDir(f); err != nil {
		return report.WithRemedy(fmt.Errorf("image directory %s: %w", dir, errors.Join(ErrNotPrivate, err)), "give a directory of your own, or one cryo may take (run as root)")
	}
	if err := f.Chmod(PrivateDirMode); err != nil {
		return fmt.Errorf("make image directory %s private (0700): %w", dir, err)
	}
	return nil
}

// ErrNotPrivate: a directory cryo could not make its own, owner-only.
var ErrNotPrivate = errors.New("cannot be made private to cryo's user")

// ownDir makes f's directory owned by this process's user and group, when
// another user owns it.
func ownDir(f *os.File) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if int(st.Uid) == os.Geteuid() {
		return nil
	}
	if err := f.Chown(os.Geteuid(), os.Getegid()); err != nil {
		return fmt.Errorf("owned by uid %d: %w", st.Uid, err)
	}
	return nil
}

// MakePrivate sets every directory under dir, dir included, to 0700 and
// every regular file to 0600. Symlinks are left alone: chmod would follow
// them out of the directory.
func MakePrivate(dir string) error {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Chmod(path, PrivateDirMode)
		case d.Type().IsRegular():
			return os.Chmod(path, PrivateFileMode)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("make checkpoint files in %s private (0700/0600): %w", dir, err)
	}
	return nil
}
