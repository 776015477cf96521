package procfs

import (
	"os"
	"path/filepath"
	"strconv"
)

// FD is one open file descriptor of a process.
type FD struct {
	Num    string // "3"
	Path   string // /proc/PID/fd/3: stat follows it to the open file
	Target string // what it is open on: a path, "socket:[N]", "anon_inode:[io_uring]"
}

// FDs are pid's open file descriptors, by name; one closed while they are
// read is left out.
func FDs(pid int) ([]FD, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]FD, 0, len(entries))
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		target, err := os.Readlink(p)
		if err != nil {
			continue // closed meanwhile
		}
		out = append(out, FD{Num: e.Name(), Path: p, Target: target})
	}
	return out, nil
}
