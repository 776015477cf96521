package orchestrate

import (
	"context"
	"errors"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Restorer is a front end's part of a restore, between CheckRestore and the
// CUDA resume: its CRIU call, and how to find and end what it brought back.
type Restorer struct {
	// Restore runs the front end's restore (CRIU for a bare tree, runc
	// restore for a container) and returns the restored root's pid. A
	// failure with a CRIU log is a *CRIUError, whose cause the error quotes.
	// ctx ends at the restore's deadline: Restore must then stop CRIU and
	// return.
	Restore func(ctx context.Context) (int, error)
	// Target describes the restored processes from their root's pid.
	Target func(pid int) Target
	// Kill ends the restored processes after a failed CUDA resume, for a
	// front end whose caller cannot do anything with a task that would
	// hang; nil leaves them running for the user (a bare tree).
	Kill func(ctx context.Context)
	// Remedy says what to do about a failed Restore; nil: read CRIU's log.
	Remedy func(err error) string
	// Cleanup removes what a failed Restore left (CRIU and what it
	// restored, a container's runc state, mounts and cgroups), so that
	// nothing of it stays and the caller can delete the container; nil:
	// nothing to remove. Removed says what became of it, for the error.
	Cleanup func(ctx context.Context) error
	Removed string
	// PostRestore, if set, is run once the restored processes run with
	// their CUDA state; a failure leaves them running (PostHookFailed).
	PostRestore *Hook
	// Lock, if set, is the target's lock the front end holds from the
	// check to the CUDA resume: the resume uses it (for a Target that
	// names none) instead of taking its own.
	Lock *lock.Lock
}

// runRestore is one Restore.
func runRestore(ctx context.Context, e env, id string, m *manifest.Manifest, r Restorer) (int, error) {
	if err := e.cfg.RestoreTimeoutErr; err != nil {
		return 0, &report.StepError{Op: "restore", ID: id, Step: StepRestore, Err: err, Outcome: "nothing was restored",
			Remedy: "unset " + config.EnvRestoreTimeout + " or give it a positive duration such as 15m"}
	}
	rs := &restore{e: e, id: id, m: m, rs: r}
	rs.rs.Restore = startedFlag(r.Restore, &rs.started)
	seq := rs.runner()
	if err := seq.run(ctx); err != nil {
		return rs.pid, err
	}
	if seq.kept != nil {
		return rs.pid, rs.postHookError(ctx, seq.kept)
	}
	return rs.pid, nil
}

// restore is one run of Restore: the front end's part, and what its steps
// found (the restored root, what the post-restore hook ran on).
type restore struct {
	e       env
	id      string
	m       *manifest.Manifest
	rs      Restorer
	pid     int         // the restored root, once the restore step is done
	hooked  restoredSet // what the post-restore hook ran on
	started bool        // the front end's restore began (CRIU may have run)
}

// runner is the restore's step runner.
func (r *restore) runner() *runner {
	return &runner{stepper: r.e.stepper, op: "restore", id: r.id, steps: r.table(),
		// Interrupted before CRIU's restore is done, nothing is left of it;
		// after, the resume completes it (restoreinterrupt.go).
		interruptible: true,
		committed:     func() bool { return r.pid != 0 },
		record: func(s StepName, d time.Duration, _ error) {
			if r.m != nil {
				r.m.RestoreSteps = append(r.m.RestoreSteps, manifest.Step{Name: string(s), Seconds: d.Seconds()})
			}
		},
		failed: r.failed,
	}
}

// failed is the error of the restore's failed step s.
func (r *restore) failed(ctx context.Context, s StepName, err error, outcome string) error {
	if s == StepRestore && interrupted(ctx) {
		return interruptedRestore(ctx, r.id, s, r.interruptedCRIU(ctx))
	}
	if s == StepRestore {
		return r.failedRestore(ctx, err)
	}
	return killedError(err, outcome)
}

// table is Restore's table; the restore step sets pid, the post-restore
// hook's step hooked.
func (r *restore) table() []step {
	return []step{
		{name: StepRestore, do: func(ctx context.Context) error {
			p, err := restoreWithin(ctx, r.e.cfg.RestoreTimeout, r.rs.Restore)
			if err != nil {
				return err
			}
			r.pid = p
			return nil
		}, undo: func(ctx context.Context) undone { return killRestored(ctx, r.rs) }},
		// ResumeRestored is a sequence of its own: front ends also call it alone.
		{name: StepResume, kind: kindInner, do: func(ctx context.Context) error {
			ctx, cancel := uninterrupted(ctx)
			defer cancel()
			return pastDeadlineIn(ctx, "CUDA resume", resumeRestored(ctx, r.e, r.rs.restored(r.pid), r.m))
		}},
		r.postHookStep(),
	}
}

// postHookStep runs the restore's post-restore hook on the restored
// processes. It is soft: a failure does not fail the sequence (whose
// rollback would kill the processes), since they were restored and run
// with their GPU state, and killing them would lose the only running copy
// for a hook that the user can run again. Restore returns it after the run,
// checked (posthookcheck.go): hooked is what the hook ran on.
func (r *restore) postHookStep() step {
	return step{name: StepPostHook, soft: true, skip: func() bool { return r.rs.PostRestore == nil },
		do: func(ctx context.Context) error {
			r.hooked = r.restoredNow(ctx, r.rs.Target(r.pid))
			return r.rs.PostRestore.run(ctx, r.e.log, r.id, hook.PostRestore, r.pid)
		}}
}

// failedRestore removes what a failed restore step left, through the front
// end's Cleanup, and says so in the error with the remedy.
func (rs *restore) failedRestore(ctx context.Context, err error) error {
	log, id, r := rs.e.log, rs.id, rs.rs
	remedy := "read CRIU's log from its first Error line; the checkpoint itself was not changed"
	switch {
	case errors.Is(err, ErrRestoreDeadline):
		remedy = RestoreDeadlineRemedy
	case r.Remedy != nil:
		remedy = r.Remedy(err)
	}
	outcome := "nothing was restored"
	if r.Cleanup != nil {
		if cerr := r.Cleanup(context.WithoutCancel(ctx)); cerr != nil {
			log.Warn("failed restore not cleaned up", "id", id, "error", cerr)
			outcome += "; " + cerr.Error()
		} else if r.Removed != "" {
			outcome += "; " + r.Removed
		}
	}
	return &report.StepError{Op: "restore", ID: id, Step: StepRestore, Err: err, LogPath: CRIULogPath(err), Outcome: outcome, Remedy: remedy}
}

// interruptedCRIU is the outcome of a restore interrupted at its restore
// step: CRIU had not started (the interrupt came between steps), or it was
// stopped and the front end's Cleanup removed what it had restored.
func (rs *restore) interruptedCRIU(ctx context.Context) string {
	log, id, started, r := rs.e.log, rs.id, rs.started, rs.rs
	if !started {
		return "nothing was restored: CRIU had not started"
	}
	outcome := "CRIU was stopped and the processes it had restored were killed"
	if r.Cleanup == nil {
		return outcome
	}
	if err := r.Cleanup(context.WithoutCancel(ctx)); err != nil {
		log.Warn("interrupted restore not cleaned up", "id", id, "error", err)
		return "CRIU was stopped, but what it restored could not all be removed: " + err.Error()
	}
	if r.Removed != "" {
		outcome += "; " + r.Removed
	}
	return outcome
}

// restored is the Target of the restored root pid, under the front end's
// lock.
func (r Restorer) restored(pid int) Target {
	t := r.Target(pid)
	if t.Lock == nil {
		t.Lock = r.Lock
	}
	return t
}

// startedFlag is restore, setting *started as it begins.
func startedFlag(restore func(context.Context) (int, error), started *bool) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		*started = true
		return restore(ctx)
	}
}

// killedOutcome is what a restore whose CUDA resume failed says when the
// front end killed the restored processes.
const killedOutcome = "the restored processes were killed: with their CUDA state suspended they would hang"

// killRestored undoes the restore step for a front end whose caller could
// do nothing with a task that would hang (Restorer.Kill); a bare tree is
// left running for the user.
func killRestored(ctx context.Context, r Restorer) undone {
	if r.Kill == nil {
		return undone{}
	}
	r.Kill(context.WithoutCancel(ctx))
	return undone{outcome: killedOutcome, last: true}
}

// killedError is the failed resume's error, saying so when the restored
// processes were killed.
func killedError(err error, outcome string) error {
	var se *report.StepError
	if outcome != "" && errors.As(err, &se) {
		se.Outcome = outcome
		se.Remedy = "see the cause above, then restore again (the checkpoint itself was not changed)"
	}
	return err
}
