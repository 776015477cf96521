package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// What a checkpoint does when a step fails, and with what its dump left:
// the error, the undos, and the tree held stopped.
//
// A dump that leaves the tree stopped (Target.DumpLeavesStopped) keeps the
// processes until the checkpoint is durable: they are killed only after the
// digests and the manifest are synced, and continued when anything before
// that fails. Durable before destructive.

// checkpointUndo is the failure half of a checkpoint: what it found and
// suspended (found, with its rollback), and the runner whose completed
// steps say what the dump did. The checkpoint builds it (checkpoint.undo)
// when a step, an undo or the seal needs it.
type checkpointUndo struct {
	found        suspensionUndo
	r            *runner
	dir          string
	leaveRunning bool
}

// undo is the failure half of c, as the run stands now.
func (c *checkpoint) undo() checkpointUndo {
	return checkpointUndo{found: c.suspension.undo(), r: c.r, dir: c.dir, leaveRunning: c.leaveRunning}
}

// stepError turns a failed step into a *StepError, with the outcome the
// runner's rollback left.
func (c checkpointUndo) stepError(ctx context.Context, step StepName, err error, outcome string) error {
	id, front := c.found.t.ID, c.found.e.front
	e := &report.StepError{Op: "checkpoint", ID: id, Step: string(step), Err: err, LogPath: CRIULogPath(err), Remedy: checkpointRemedy(step, err, c.dir), Outcome: outcome}
	if w, ok := worded(front, RemedyLockTimeout); ok && errors.Is(err, cuda.ErrTimeout) {
		e.Remedy = w
	}
	if step == StepDump && !errors.Is(err, context.Canceled) {
		e.Remedy = dumpRemedy(front, err)
	}
	c.wakeAfterFailure(ctx)
	e.Err, outcome = rolledBackOutcome(err, outcome, untouchedOutcome)
	var remedy string
	e.Outcome, e.Fate, remedy = c.found.checkedOutcome(ctx, step, outcome, errors.Is(err, context.Canceled), c.dumpState())
	if remedy != "" {
		e.Remedy = remedy
	}
	return e
}

// undoSuspend resumes the CUDA this run suspended, unless a resume (or
// the dump's undo) already did.
func (c checkpointUndo) undoSuspend(ctx context.Context) undone {
	if !suspendedIn(c.r) {
		return undone{}
	}
	return undone{outcome: c.found.rollback(ctx)}
}

// undoDump: after the dump, the processes are what the dump left. Held
// stopped, they are given back (CUDA first); gone, nothing before the dump
// can be undone; left running, CUDA still needs its resume if the resume
// step did not come.
func (c checkpointUndo) undoDump(ctx context.Context) undone {
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

// wakeAfterFailure wakes the server of a failed checkpoint or pause whose
// pre-checkpoint hook had run, once the rollback has given the processes
// back (CUDA resumed, stopped ones continued); not where the dump ended
// them. It is no undo of the runner's: an undo that gives the processes
// back whole ends the walk before the earlier steps' undos.
func (c checkpointUndo) wakeAfterFailure(ctx context.Context) {
	if !c.r.Done(StepPreHook) || c.workloadGone() {
		return
	}
	wake(context.WithoutCancel(ctx), c.found.e.log, c.found.t)
}

// checkLeftRunning checks a leave-running checkpoint that succeeded: the
// processes it resumed run, by the driver's word. The checkpoint is
// complete either way; the error says what became of the processes.
func (c checkpointUndo) checkLeftRunning(ctx context.Context) error {
	f := c.found
	if !c.leaveRunning || len(f.toSuspend) == 0 {
		return nil
	}
	pids := without(f.stoppedTree(ctx), foundSuspended(f.m))
	w := checkWorkload(ctx, f.e.gpu.driver, pids, f.toSuspend)
	if w.intact() {
		return nil
	}
	e := &report.StepError{Op: "checkpoint", ID: f.t.ID, Step: StepCheck, Err: fmt.Errorf("after the resume: %s", w),
		Outcome: "the checkpoint in " + c.dir + " is complete"}
	if len(w.gone) > 0 {
		e.Fate = report.FateLostKept
		e.Remedy = "restore the checkpoint in " + c.dir + " once what is left of the processes is stopped"
		return e
	}
	e.Remedy = recoverRemedy(w.held())
	return e
}

// stoppedAfterDump reports whether the dumped processes wait, stopped, for
// this run to kill or continue them.
func (c checkpointUndo) stoppedAfterDump() bool {
	return c.dumped() && !c.leaveRunning && c.found.t.DumpLeavesStopped
}

// dumpState is what the dump did, for the check of a failed run.
func (c checkpointUndo) dumpState() dumpState {
	return dumpState{dir: c.dir, dumped: c.dumped(), gone: c.workloadGone()}
}

// workloadGone: the dump ended the processes (no leave-running, and not
// held stopped): an interrupt then completes the checkpoint rather than
// abandon the only copy of the workload.
func (c checkpointUndo) workloadGone() bool {
	return c.dumped() && !c.leaveRunning && !c.found.t.DumpLeavesStopped
}

// dumped: the dump succeeded, and no undo gave the processes back since
// (without leaveRunning they are then gone, or held stopped).
func (c checkpointUndo) dumped() bool { return c.r.Done(StepDump) }

// killStopped ends the dumped tree once the checkpoint is complete. Only
// the dumped tree is signalled; the processes' parents reap them.
func (c checkpointUndo) killStopped(ctx context.Context) {
	if !c.stoppedAfterDump() {
		return
	}
	for _, pid := range c.found.stoppedTree(ctx) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			c.found.e.log.Warn("could not kill a dumped process", "id", c.found.t.ID, "pid", pid, "error", err)
		}
	}
}

// continueStopped gives the stopped tree back after a failure that came
// after the dump: CUDA resumed first, as any rollback does (each CUDA
// process runs again only once its GPU state is back: internal/cuda releases it),
// then SIGCONT to the rest of the tree. It returns the outcome for the
// error.
func (c checkpointUndo) continueStopped(ctx context.Context) string {
	outcome := "the processes were left running, CUDA untouched"
	if suspendedIn(c.r) {
		outcome = c.found.rollback(ctx)
	}
	var failed []int
	for _, pid := range c.found.stoppedTree(ctx) {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			failed = append(failed, pid)
		}
	}
	// The processes run on from the dumped state, so the images are stale
	// (their files move on): a restore must not complete them later (see
	// manifest.DumpCompleted). Removing a file works on a full disk too.
	if err := manifest.AbandonDump(c.dir); err != nil {
		c.found.e.log.Warn("could not mark the abandoned dump", "id", c.found.t.ID, "dir", c.dir, "error", err)
	}
	if len(failed) > 0 {
		return fmt.Sprintf("%s, but pid(s) %v could not be continued: run `cryo recover %d`", outcome, failed, failed[0])
	}
	return outcome + " (the checkpoint in " + c.dir + " was not completed)"
}
