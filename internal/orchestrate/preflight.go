package orchestrate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// ErrUndumpable: a process holds something CRIU cannot checkpoint.
var ErrUndumpable = errors.New("process state CRIU cannot checkpoint")

// undumpable lists kinds of file CRIU (4.2) cannot checkpoint, with what
// to do about them. Finding one before the suspend saves the workload a
// pointless pause: the dump would fail and the checkpoint roll back.
var undumpable = []struct{ link, what, remedy string }{
	{"anon_inode:[io_uring]", "an io_uring instance",
		"CRIU cannot checkpoint io_uring; turn it off in the program (libuv: UV_USE_IO_URING=0; PyTorch's TCPStore: USE_LIBUV=0)"},
}

// checkDumpable refuses, before anything is suspended, a process set with
// a file CRIU cannot checkpoint, naming the process and the remedy.
func checkDumpable(pids []int) error {
	for _, pid := range pids {
		fds, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/fd/*")
		for _, fd := range fds {
			link, err := os.Readlink(fd)
			if err != nil {
				continue
			}
			for _, u := range undumpable {
				if strings.HasPrefix(link, u.link) {
					return fmt.Errorf("%w: pid %d (%s) holds %s (fd %s); nothing was suspended; remedy: %s",
						ErrUndumpable, pid, procfs.Comm(pid), u.what, filepath.Base(fd), u.remedy)
				}
			}
		}
	}
	return nil
}
