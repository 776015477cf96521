package orchestrate

import (
	"context"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/report"
)

// A failed post-restore hook leaves the restore standing: the processes
// were restored and run with their GPU state. That is said only once a
// check after the hook found it so; a hook can take a process with it (an
// exec that kills the server, a wake endpoint that crashes it), and then
// the restore failed, and the report says which process died.

// restoredSet is what the post-restore hook ran on: the restored
// processes, their root first, and the CUDA ones among them.
type restoredSet struct{ pids, cuda []int }

// postHookRuns is the outcome of a failed post-restore hook whose check
// found every restored process running, CUDA running.
const postHookRuns = "the restored processes run, with their GPU state; the hook's action did not take place"

// restoredNow lists t's processes and its CUDA ones, before the hook runs.
func (rs *restore) restoredNow(ctx context.Context, t Target) restoredSet {
	pids, procs, _, err := rs.e.gpu.find(ctx, t)
	if err != nil {
		return restoredSet{}
	}
	s := restoredSet{pids: pids}
	for _, p := range procs {
		s.cuda = append(s.cuda, p.PID)
	}
	return s
}

// postHookError is the restore's error for a failed post-restore hook,
// with the outcome that the check of the hooked processes found.
func (rs *restore) postHookError(ctx context.Context, err error) error {
	id, hooked := rs.id, rs.hooked
	e := &report.StepError{Op: "restore", ID: id, Step: StepPostHook, Err: err, Outcome: postHookRuns, Fate: report.FateIntact,
		Remedy: "run the hook's action by hand (or fix the server and restart it); give a longer deadline if it timed out"}
	if len(hooked.pids) == 0 {
		return e // nothing was listed before the hook: the hook's run failed before it touched them
	}
	w := checkWorkload(ctx, rs.e.gpu.driver, hooked.pids, hooked.cuda)
	if w.intact() {
		return e
	}
	e.Outcome = fmt.Sprintf("the hook's action did not take place; checked after the hook: %s", w)
	if len(w.gone) == 0 {
		e.Fate, e.Remedy = report.FateUnknown, recoverRemedy(w.held())
		return e
	}
	e.Fate = report.FateLostKept
	e.Remedy = "see the hook's error above: stop what is left of the restored processes, then restore again (the checkpoint itself was not changed)"
	return e
}
