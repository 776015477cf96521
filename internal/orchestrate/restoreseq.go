package orchestrate

import (
	"context"
	"errors"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
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

// Restore is the one restore sequence that follows CheckRestore, for every
// front end: the front end's restore as the restore step (with its events,
// its duration in m, and CRIU's cause on failure), then the CUDA resume of
// the restored processes. It returns the restored root's pid, and a
// *StepError naming the step that failed and what became of the processes.
func (o *Orchestrator) Restore(ctx context.Context, id string, m *manifest.Manifest, r Restorer) (int, error) {
	if err := o.Config.RestoreTimeoutErr; err != nil {
		return 0, &report.StepError{Op: "restore", ID: id, Step: StepRestore, Err: err, Outcome: "nothing was restored",
			Remedy: "unset " + config.EnvRestoreTimeout + " or give it a positive duration such as 15m"}
	}
	var pid int
	var hooked restoredSet
	started := false
	r.Restore = startedFlag(r.Restore, &started)
	seq := &runner{o: o, op: "restore", id: id, steps: o.restoreTable(id, m, r, &pid, &hooked),
		// Interrupted before CRIU's restore is done, nothing is left of it;
		// after, the resume completes it (restoreinterrupt.go).
		interruptible: true,
		committed:     func() bool { return pid != 0 },
		record: func(s StepName, d time.Duration, _ error) {
			if m != nil {
				m.RestoreSteps = append(m.RestoreSteps, manifest.Step{Name: string(s), Seconds: d.Seconds()})
			}
		},
		failed: func(ctx context.Context, s StepName, err error, outcome string) error {
			if s == StepRestore && interrupted(ctx) {
				return interruptedRestore(ctx, id, s, o.interruptedCRIU(ctx, id, started, r))
			}
			if s == StepRestore {
				return o.failedRestore(ctx, id, err, r)
			}
			return killedError(err, outcome)
		},
	}
	if err := seq.run(ctx); err != nil {
		return pid, err
	}
	if seq.kept != nil {
		return pid, o.postHookError(ctx, id, seq.kept, hooked)
	}
	return pid, nil
}

// restoreTable is Restore's table; the restore step sets *pid, the
// post-restore hook's step *hooked.
func (o *Orchestrator) restoreTable(id string, m *manifest.Manifest, r Restorer, pid *int, hooked *restoredSet) []step {
	return []step{
		{name: StepRestore, do: func(ctx context.Context) error {
			p, err := restoreWithin(ctx, o.Config.RestoreTimeout, r.Restore)
			if err != nil {
				return err
			}
			*pid = p
			return nil
		}, undo: func(ctx context.Context) undone { return killRestored(ctx, r) }},
		// ResumeRestored is a sequence of its own: front ends also call it alone.
		{name: StepResume, kind: kindInner, do: func(ctx context.Context) error {
			ctx, cancel := uninterrupted(ctx)
			defer cancel()
			return pastDeadlineIn(ctx, "CUDA resume", o.ResumeRestored(ctx, r.restored(*pid), m))
		}},
		o.postHookStep(id, r, pid, hooked),
	}
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
