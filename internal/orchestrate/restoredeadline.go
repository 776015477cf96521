package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
)

// ErrRestoreDeadline is a restore that CRIU did not finish within
// CRYO_RESTORE_TIMEOUT: it hung, or the checkpoint is bigger than the
// bound allows for.
var ErrRestoreDeadline = errors.New("the restore did not finish in time")

// RestoreDeadlineRemedy is the remedy of a restore cut off at its deadline.
const RestoreDeadlineRemedy = "if the checkpoint is that large (CRIU reads a few GiB a second), raise " +
	config.EnvRestoreTimeout + "; otherwise CRIU hung on it: read its log and do not restore this checkpoint again"

// RestoreDeadlineExceeded is the error of a restore that limit cut off;
// err is what the killed runc or CRIU returned. It wraps
// ErrRestoreDeadline.
func RestoreDeadlineExceeded(limit time.Duration, err error) error {
	return &deadlineError{limit: limit, err: err}
}

// deadlineError is a restore cut off at its deadline. Its message is the
// deadline alone: what the killed runc or CRIU said ("exit status 137") is
// only the kill, and stays in the chain.
type deadlineError struct {
	limit time.Duration
	err   error
}

func (e *deadlineError) Error() string {
	return fmt.Sprintf("CRIU did not finish the restore within %s (%s) and was killed", e.limit, config.EnvRestoreTimeout)
}

func (e *deadlineError) Unwrap() []error {
	if e.err == nil {
		return []error{ErrRestoreDeadline}
	}
	return []error{ErrRestoreDeadline, e.err}
}

// restoreWithin runs a front end's restore with the restore's deadline
// (none where limit is zero: a Config built by hand).
func restoreWithin(ctx context.Context, limit time.Duration, restore func(context.Context) (int, error)) (int, error) {
	if limit <= 0 {
		return restore(ctx)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, limit, ErrRestoreDeadline)
	defer cancel()
	pid, err := restore(ctx)
	if err != nil && errors.Is(context.Cause(ctx), ErrRestoreDeadline) {
		return 0, RestoreDeadlineExceeded(limit, err)
	}
	return pid, err
}

// failedRestore removes what a failed restore step left, through the front
// end's Cleanup, and says so in the error with the remedy.
func (o *Orchestrator) failedRestore(ctx context.Context, id string, err error, r Restorer) error {
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
			o.log().Warn("failed restore not cleaned up", "id", id, "error", cerr)
			outcome += "; " + cerr.Error()
		} else if r.Removed != "" {
			outcome += "; " + r.Removed
		}
	}
	return &StepError{Op: "restore", ID: id, Step: StepRestore, Err: err, LogPath: CRIULogPath(err), Outcome: outcome, Remedy: remedy}
}
