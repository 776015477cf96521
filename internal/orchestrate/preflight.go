package orchestrate

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
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

// preflightDump is the dump's readiness check (the preflight; a precheck,
// package precheck, comes before anything is touched): in the find step,
// before anything is suspended, it refuses a process set with a file CRIU
// cannot checkpoint, naming the process and the remedy.
func preflightDump(pids []int) error {
	for _, pid := range pids {
		fds, _ := procfs.FDs(pid)
		for _, fd := range fds {
			for _, u := range undumpable {
				if strings.HasPrefix(fd.Target, u.link) {
					return report.WithRemedy(fmt.Errorf("%w: pid %d (%s) holds %s (fd %s); nothing was suspended",
						ErrUndumpable, pid, procfs.Comm(pid), u.what, fd.Num), u.remedy)
				}
			}
		}
	}
	return nil
}
