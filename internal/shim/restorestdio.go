package shim

import (
	"os"
	"syscall"
)

// A restored task's stdio is set up in Start, not in Create: the runc
// service opens the task's stdout and stderr FIFOs for writing there, and
// such an open waits for a reader. The reader is the client that created
// the task (`ctr container restore`, cio's FIFOs); a client gone between
// Create and Start (Ctrl-C on ctr) leaves none, and the open waited for
// good, inside Start, with the restored tree stopped and the runc
// service's lock held, so that no State, Kill or Delete could reach it.
// The shim holds a reader of its own across Start: the open goes through,
// and the runc service's own reader keeps the FIFO open after that.

// holdStdio opens the FIFOs among paths for reading, without blocking,
// and returns what closes them.
func holdStdio(paths ...string) func() {
	var held []*os.File
	for _, p := range paths {
		if fi, err := os.Stat(p); p == "" || err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			continue // none, or a log file or binary:// URI the runc service opens itself
		}
		if f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			held = append(held, f)
		}
	}
	return func() {
		for _, f := range held {
			f.Close()
		}
	}
}
