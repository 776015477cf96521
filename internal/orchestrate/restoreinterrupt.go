package orchestrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/report"
)

// An interrupted restore (a front end's context cancelled by a signal)
// stops between steps while nothing runs yet, stops CRIU and kills what it
// restored during the restore step, and completes once CRIU is done: the
// tree then exists, and the CUDA resume is the short way to a workload
// that runs (a tree killed there would only cost the user a second
// restore). The checkpoint's files are never written by a restore past
// its completion step, so an interrupted restore leaves it whole.

// ErrRestoreInterrupted: a signal stopped a restore before its processes
// ran; the error's outcome says what was undone.
var ErrRestoreInterrupted = errors.New("restore interrupted")

// RestoreRetryRemedy is an interrupted restore's remedy, in the words of
// a front end that cannot name the command that restored (a front end
// that can replaces it: the CLI gives its own command line).
const RestoreRetryRemedy = "the checkpoint was not changed and is whole: restore it again"

// interrupted reports whether ctx was cancelled by its caller (a signal),
// not by a deadline.
func interrupted(ctx context.Context) bool {
	c := context.Cause(ctx)
	return c != nil && errors.Is(c, context.Canceled) && !errors.Is(c, ErrRestoreDeadline)
}

// interruptedRestore is the error of a restore that a signal stopped at
// step s, with what became of what it had begun.
func interruptedRestore(ctx context.Context, id string, s StepName, outcome string) error {
	return &report.StepError{Op: "restore", ID: id, Step: string(s),
		Err:     fmt.Errorf("%w: %w", ErrRestoreInterrupted, context.Cause(ctx)),
		Outcome: outcome, Remedy: RestoreRetryRemedy}
}

// uninterrupted is ctx without its cancellation, its deadline kept: for
// the CUDA resume of a tree CRIU has restored, which an interrupt must not
// cut short.
func uninterrupted(ctx context.Context) (context.Context, context.CancelFunc) {
	c := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadlineCause(c, d, ErrRestoreDeadline)
	}
	return context.WithCancel(c)
}
