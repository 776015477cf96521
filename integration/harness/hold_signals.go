package harness

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// AwaitHeld waits until no tracer holds pid's threads and every thread is
// stopped: the helper has ended its action and let go of a held process.
func AwaitHeld(t *testing.T, pid int) {
	t.Helper()
	WaitFor(t, 20*time.Second, "the process to be held stopped, with no tracer", func() bool {
		tids, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*")
		for _, d := range tids {
			tid, _ := strconv.Atoi(filepath.Base(d))
			if procfs.ThreadTracer(tid) != 0 {
				return false
			}
		}
		return cuda.Stopped(pid)
	})
}
