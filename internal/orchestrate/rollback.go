package orchestrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// stopping is what a failed checkpoint does before any undo: stop the
// digest watcher, and narrow the images' modes, since a partial dump holds
// process memory as much as a whole one.
func (c *checkpoint) stopping() {
	if c.watch != nil {
		c.watch.Stop()
		c.watch = nil
	}
	_ = manifest.MakePrivate(c.dir)
}

// stepError turns a failed step into a *StepError, with the outcome the
// runner's rollback left.
func (c *checkpoint) stepError(ctx context.Context, step StepName, err error, outcome string) error {
	e := &report.StepError{Op: "checkpoint", ID: c.t.ID, Step: string(step), Err: err, LogPath: CRIULogPath(err), Remedy: checkpointRemedy(step, err, c.dir), Outcome: outcome}
	if w, ok := c.o.remedy(RemedyLockTimeout); ok && errors.Is(err, cuda.ErrTimeout) {
		e.Remedy = w
	}
	if step == StepDump && !errors.Is(err, context.Canceled) {
		e.Remedy = c.o.dumpRemedy(err)
	}
	c.wakeAfterFailure(ctx)
	e.Err, outcome = rolledBackOutcome(err, outcome, untouchedOutcome)
	var remedy string
	e.Outcome, e.Fate, remedy = c.checkedOutcome(ctx, step, outcome, errors.Is(err, context.Canceled), c.dumpState())
	if remedy != "" {
		e.Remedy = remedy
	}
	return e
}

// undoSuspend resumes the CUDA this run suspended, unless a resume (or
// the dump's undo) already did.
func (c *checkpoint) undoSuspend(ctx context.Context) undone {
	if !c.suspended() {
		return undone{}
	}
	return undone{outcome: c.rollback(ctx)}
}

// undoDump: after the dump, the processes are what the dump left. Held
// stopped, they are given back (CUDA first); gone, nothing before the dump
// can be undone; left running, CUDA still needs its resume if the resume
// step did not come.
func (c *checkpoint) undoDump(ctx context.Context) undone {
	switch {
	case c.stoppedAfterDump():
		// The checkpoint is abandoned: the processes are ours again.
		return undone{outcome: c.continueStopped(ctx), last: true, gaveBack: true}
	case !c.leaveRunning:
		return undone{outcome: "the processes were dumped and have exited; the checkpoint in " + c.dir + " is incomplete", last: true}
	}
	return undone{outcome: "the processes were left running"}
}

// checkpointRemedy says what a user can do about a failed step.
func checkpointRemedy(step StepName, err error, dir string) string {
	switch {
	case errors.Is(err, context.Canceled):
		// Interrupted on purpose (Ctrl-C, SIGTERM): nothing is broken.
		return "none needed; take the checkpoint again when you are ready"
	case errors.Is(err, cuda.ErrNoProcess):
		return "check that the process or container is running"
	case errors.Is(err, cuda.ErrTimeout):
		return "the GPU work did not drain in time or the driver hung; retry, with a longer lock timeout, and run `cryo doctor`"
	case errors.Is(err, cuda.ErrLibraryNotFound):
		return "a process maps libcuda but cryo cannot load the driver: set CRYO_LIBCUDA to the driver's libcuda.so.1"
	case errors.Is(err, cuda.ErrNoCheckpointAPI):
		return "upgrade the NVIDIA driver to 570 or newer (the checkpoint API)"
	}
	switch step {
	case StepPreHook:
		return preHookRemedy(err)
	case StepThaw:
		return "check the container's cgroup (is another tool freezing it?) and retry"
	case StepFind, StepSuspend:
		return "run `cryo doctor` and `cryo cuda state PID` to see what the driver reports, then retry"
	case StepManifest, StepDigests:
		return "check that " + dir + " is writable and has free space, then retry"
	case StepResume:
		return "run `cryo recover PID` for the processes still suspended"
	}
	return "retry; if it fails again, run `cryo doctor`"
}

func pidList(pids []int) string {
	s := ""
	for i, p := range pids {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprint(p)
	}
	return s
}
