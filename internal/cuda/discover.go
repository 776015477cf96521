package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// Find returns the CUDA processes among pids, and the ones it skipped and
// why. A candidate maps libcuda or holds a /dev/nvidia* descriptor (a
// checkpointed process holds no descriptors but still maps libcuda); the
// driver then confirms it with a state query. A pid that does not exist
// fails the call with ErrNoProcess.
func (d *Driver) Find(ctx context.Context, pids []int) ([]Process, []Skipped, error) {
	return d.find(ctx, pids, false)
}

// FindLive is Find for a listing taken a moment earlier, such as a
// container's processes: a pid that exits before or during the scan is
// skipped, not an error. It needs no checkpoint, being gone, and a
// container that runs short-lived children (a shell loop, a health check)
// has one such pid in almost every listing, so failing on it would make
// checkpoints fail at random. Only when every pid is gone does FindLive
// fail with ErrNoProcess.
func (d *Driver) FindLive(ctx context.Context, pids []int) ([]Process, []Skipped, error) {
	procs, skipped, err := d.find(ctx, pids, true)
	if err == nil && len(procs) == 0 && allExited(skipped) {
		return nil, nil, fmt.Errorf("find: %w: every listed pid has exited (%v)", ErrNoProcess, unique(pids))
	}
	return procs, skipped, err
}

// reasonExited is the Skipped reason of a pid that FindLive saw exit.
const reasonExited = "exited during the scan"

func allExited(skipped []Skipped) bool {
	for _, s := range skipped {
		if s.Reason != reasonExited {
			return false
		}
	}
	return true
}

func (d *Driver) find(ctx context.Context, pids []int, skipGone bool) ([]Process, []Skipped, error) {
	var procs []Process
	var skipped []Skipped
	for _, pid := range unique(pids) {
		p, why, err := d.examine(ctx, pid)
		switch {
		case skipGone && errors.Is(err, ErrNoProcess):
			skipped = append(skipped, Skipped{PID: pid, Reason: reasonExited})
		case err != nil:
			return nil, nil, err
		case why != "":
			skipped = append(skipped, Skipped{PID: pid, Reason: why})
		default:
			procs = append(procs, p)
		}
	}
	return procs, skipped, nil
}

// examine returns pid as a CUDA process, or why it is not one.
func (d *Driver) examine(ctx context.Context, pid int) (Process, string, error) {
	if err := checkAlive("find", pid); err != nil {
		return Process{}, "", err
	}
	why, err := candidate(pid)
	if err != nil || why != "" {
		return Process{}, why, err
	}
	st, err := d.State(ctx, pid)
	var derr *DriverError
	switch {
	case errors.As(err, &derr) && !errors.Is(err, ErrNoProcess):
		return Process{}, "libcuda mapped but the driver holds no CUDA state for it: " + derr.Name, nil
	case err != nil:
		return Process{}, "", fmt.Errorf("find: confirming pid %d with the driver: %w", pid, err)
	}
	return Process{PID: pid, State: st}, "", nil
}

// candidate returns "" when pid looks like a CUDA process, else why not.
func candidate(pid int) (string, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	maps, err := os.ReadFile(dir + "/maps")
	if err != nil {
		return "", fmt.Errorf("find: read %s/maps: %w", dir, noProcess(pid, err))
	}
	if bytes.Contains(maps, []byte("libcuda.so")) {
		return "", nil
	}
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return "", fmt.Errorf("find: list %s/fd: %w", dir, noProcess(pid, err))
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, "/dev/nvidia") {
			return "", nil
		}
	}
	return "no CUDA driver mapped (no libcuda.so in its maps, no /dev/nvidia* open)", nil
}

// noProcess turns a vanished /proc entry into ErrNoProcess.
func noProcess(pid int, err error) error {
	if errors.Is(err, os.ErrNotExist) || !procfs.Alive(pid) {
		return fmt.Errorf("%w: pid %d has exited (%v)", ErrNoProcess, pid, err)
	}
	return err
}

func unique(pids []int) []int {
	seen := make(map[int]bool, len(pids))
	var out []int
	for _, p := range pids {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// MapsDriver reports whether pid looks like a CUDA process, from /proc
// alone (libcuda mapped, or a /dev/nvidia* descriptor), without asking the
// driver: for a listing that must not wait on it. An error wraps
// ErrNoProcess when pid has exited.
func MapsDriver(pid int) (bool, error) {
	why, err := candidate(pid)
	return err == nil && why == "", err
}
