package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/leftovers"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// bareRemoved is what a failed bare restore's error says became of it once
// killRestoredTree has run.
const bareRemoved = "nothing of it is left running"

// killRestoredTree kills what a failed or cut-off CRIU restore of dir had
// brought back, and reaps what of it is this process's child (CRIU forks
// the restored root as its caller's child, rst_sibling). The restored
// processes have the checkpoint's pids, which precheck.ImagePIDsFree saw
// free before the restore began (at clock tick began): a process that
// holds one now and started since is CRIU's work, whoever its parent is by
// now. A CRIU that failed on its own has killed its tree already; then
// there is nothing to do.
func killRestoredTree(ctx context.Context, dir string, began uint64) error {
	pids, err := criuimg.TreePIDs(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", leftovers.ErrLeft, err)
	}
	var killed []int
	for _, pid := range pids {
		start, err := strconv.ParseUint(procfs.StartTime(pid), 10, 64)
		if err != nil || start+1 < began || pid == os.Getpid() {
			continue // gone, or not restored: it ran before the restore
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("%w: kill restored process %d: %w", leftovers.ErrLeft, pid, err)
		}
		killed = append(killed, pid)
	}
	return reap(ctx, killed)
}

// bootTicks is now in the clock ticks since boot that /proc/PID/stat
// counts start times in (USER_HZ, 100 a second); 0 if unknown, which
// makes every process count as started since.
func bootTicks() uint64 {
	data, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return uint64(secs * 100)
}

// reap waits for the killed processes that are this process's children,
// so that none stays a zombie; the others are reaped by their parents.
func reap(ctx context.Context, pids []int) error {
	deadline := time.Now().Add(leftovers.KillWait)
	for _, pid := range pids {
		for {
			var ws unix.WaitStatus
			got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			if got == pid || errors.Is(err, unix.ECHILD) {
				break
			}
			if err != nil && !errors.Is(err, unix.EINTR) {
				return fmt.Errorf("%w: reap restored process %d: %w", leftovers.ErrLeft, pid, err)
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%w: restored process %d survived SIGKILL for %s", leftovers.ErrLeft, pid, leftovers.KillWait)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
