package runtime

import (
	"context"
	"errors"

	"github.com/cryo-gpu/cryo/snapshot"
)

// Restorer is a front end's part of a restore, between CheckRestore and the
// CUDA resume: its CRIU call, and how to find and end what it brought back.
type Restorer struct {
	// Restore runs the front end's restore (CRIU for a bare tree, runc
	// restore for a container) and returns the restored root's pid. A
	// failure with a CRIU log is a *CRIUError, whose cause the error quotes.
	Restore func(ctx context.Context) (int, error)
	// Target describes the restored processes from their root's pid.
	Target func(pid int) Target
	// Kill ends the restored processes after a failed CUDA resume, for a
	// front end whose caller cannot do anything with a task that would
	// hang; nil leaves them running for the user (a bare tree).
	Kill func(ctx context.Context)
	// Remedy says what to do about a failed Restore; nil: read CRIU's log.
	Remedy func(err error) string
}

// Restore is the one restore sequence that follows CheckRestore, for every
// front end: the front end's restore as the restore step (with its events,
// its duration in m, and CRIU's cause on failure), then the CUDA resume of
// the restored processes. It returns the restored root's pid, and a
// *StepError naming the step that failed and what became of the processes.
func (o *Orchestrator) Restore(ctx context.Context, id string, m *snapshot.Manifest, r Restorer) (int, error) {
	var pid int
	d, err := o.step(ctx, id, StepRestore, func(ctx context.Context) error {
		var err error
		pid, err = r.Restore(ctx)
		return err
	})
	if m != nil {
		m.RestoreSteps = append(m.RestoreSteps, snapshot.Step{Name: StepRestore, Seconds: d.Seconds()})
	}
	if err != nil {
		remedy := "read CRIU's log from its first Error line; the checkpoint itself was not changed"
		if r.Remedy != nil {
			remedy = r.Remedy(err)
		}
		return 0, &StepError{Op: "restore", ID: id, Step: StepRestore, Err: err, LogPath: CRIULogPath(err), Outcome: "nothing was restored", Remedy: remedy}
	}
	if err := o.ResumeRestored(ctx, r.Target(pid), m); err != nil {
		if r.Kill == nil {
			return pid, err
		}
		r.Kill(context.WithoutCancel(ctx))
		var se *StepError
		if errors.As(err, &se) {
			se.Outcome = "the restored processes were killed: with their CUDA state suspended they would hang"
			se.Remedy = "see the cause above, then restore again (the checkpoint itself was not changed)"
		}
		return pid, err
	}
	return pid, nil
}
