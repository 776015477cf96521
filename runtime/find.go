package runtime

import (
	"context"
	"errors"

	"github.com/cryo-gpu/cryo/cudacr"
)

// findAttempts bounds how often the process list is taken again when a
// process exits between the listing and the scan.
const findAttempts = 3

// findCUDA lists t's processes and finds the CUDA ones among them. A
// container's short-lived processes (a health check, a shell) may exit
// between the listing and the scan, which the driver layer reports as
// ErrNoProcess; that is no reason to fail a checkpoint, so the list is
// taken again. A pid that stays gone fails the call after findAttempts.
func (o *Orchestrator) findCUDA(ctx context.Context, t Target) ([]int, []cudacr.Process, []cudacr.Skipped, error) {
	var err error
	for i := 0; i < findAttempts; i++ {
		var pids []int
		if pids, err = t.PIDs(ctx); err != nil {
			return nil, nil, nil, err
		}
		if len(pids) == 0 {
			return nil, nil, nil, ErrNoProcess
		}
		procs, skipped, ferr := o.driver().Find(ctx, pids)
		if ferr == nil {
			return pids, procs, skipped, nil
		}
		if err = ferr; !errors.Is(err, cudacr.ErrNoProcess) {
			break
		}
	}
	return nil, nil, nil, err
}
