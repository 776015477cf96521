package snapshot

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
// wider umask are out of reach from the start.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, PrivateDirMode); err != nil {
		return fmt.Errorf("create image directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, PrivateDirMode); err != nil {
		return fmt.Errorf("make image directory %s private (0700): %w", dir, err)
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
