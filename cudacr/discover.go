package cudacr

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/cudacr/proc"
)

// Find returns the CUDA processes among pids, and the ones it skipped and
// why. A candidate maps libcuda or holds a /dev/nvidia* descriptor (a
// checkpointed process holds no descriptors but still maps libcuda); the
// driver then confirms it with a state query. A pid that does not exist
// fails the call with ErrNoProcess.
func (d *Driver) Find(ctx context.Context, pids []int) ([]Process, []Skipped, error) {
	var procs []Process
	var skipped []Skipped
	for _, pid := range unique(pids) {
		if err := checkAlive("find", pid); err != nil {
			return nil, nil, err
		}
		why, err := candidate(pid)
		if err != nil {
			return nil, nil, err
		}
		if why != "" {
			skipped = append(skipped, Skipped{PID: pid, Reason: why})
			continue
		}
		st, err := d.State(ctx, pid)
		var derr *DriverError
		switch {
		case errors.As(err, &derr) && !errors.Is(err, ErrNoProcess):
			skipped = append(skipped, Skipped{PID: pid, Reason: "libcuda mapped but the driver holds no CUDA state for it: " + derr.Name})
		case err != nil:
			return nil, nil, fmt.Errorf("find: confirming pid %d with the driver: %w", pid, err)
		default:
			procs = append(procs, Process{PID: pid, State: st})
		}
	}
	return procs, skipped, nil
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
	if errors.Is(err, os.ErrNotExist) || !proc.Alive(pid) {
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
