package orchestrate

import (
	"errors"

	"golang.org/x/sys/unix"
)

// ErrNoSpace: the image directory's file system has less space than the
// dump is estimated to write.
var ErrNoSpace = errors.New("not enough space for the checkpoint")

// availBytes is the space available to this user on dir's file system.
func availBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
