package hook

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// lockedNetns moves the calling goroutine, locked to its thread for good,
// into pid's network namespace.
func lockedNetns(t *testing.T, pid int) {
	runtime.LockOSThread()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Error(err)
	}
}
