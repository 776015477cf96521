package orchestrate

import (
	"context"
	"errors"

	"github.com/cryo-gpu/cryo/internal/cuda"
)

// findAttempts bounds how often the process list is taken again when
// every listed process has exited by the time of the scan.
const findAttempts = 3

// find lists t's processes and finds the CUDA ones among them. A
// container's short-lived processes (a health check, a shell loop's
// sleep) may exit between the listing and the scan; FindLive skips them,
// since a process that is gone needs no checkpoint. Only when every listed
// pid is gone is the list taken again, and that failing findAttempts times
// fails the call with cuda.ErrNoProcess.
func (g gpu) find(ctx context.Context, t Target) ([]int, []cuda.Process, []cuda.Skipped, error) {
	var err error
	for i := 0; i < findAttempts; i++ {
		var pids []int
		if pids, err = t.PIDs(ctx); err != nil {
			return nil, nil, nil, err
		}
		if len(pids) == 0 {
			return nil, nil, nil, errNoTarget
		}
		procs, skipped, ferr := g.driver.FindLive(ctx, pids)
		if ferr == nil {
			return pids, procs, skipped, nil
		}
		if err = ferr; !errors.Is(err, cuda.ErrNoProcess) {
			break
		}
	}
	return nil, nil, nil, err
}
