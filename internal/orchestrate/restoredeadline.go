package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrRestoreDeadline is a restore that did not finish within its deadline
// (CRYO_RESTORE_TIMEOUT): it hung, or the checkpoint is bigger than the
// bound allows for. It is config's, so that the image packages below the
// orchestration can tell it too.
var ErrRestoreDeadline = config.ErrRestoreDeadline

// RestoreDeadlineRemedy is the remedy of a restore cut off at its deadline.
const RestoreDeadlineRemedy = config.RestoreDeadlineRemedy

// RestoreDeadlineExceeded is the error of a restore that limit cut off
// while CRIU ran; err is what the killed runc or CRIU returned. It wraps
// ErrRestoreDeadline.
func RestoreDeadlineExceeded(limit time.Duration, err error) error {
	return &deadlineError{limit: limit, err: err}
}

// DeadlineExceededIn is the error of a restore whose deadline (limit)
// passed during stage ("unpack", "CUDA resume"), with what the stage
// returned. It wraps ErrRestoreDeadline.
func DeadlineExceededIn(stage string, limit time.Duration, err error) error {
	return &deadlineError{limit: limit, stage: stage, err: err}
}

// deadlineError is a restore cut off at its deadline. Its message is the
// deadline alone: what the killed runc or CRIU said ("exit status 137") is
// only the kill, and stays in the chain.
type deadlineError struct {
	limit time.Duration
	stage string // "": CRIU's
	err   error
}

func (e *deadlineError) Error() string {
	if e.stage != "" {
		return fmt.Sprintf("the restore did not finish within %s (%s): its deadline passed during the %s", e.limit, config.EnvRestoreTimeout, e.stage)
	}
	return fmt.Sprintf("CRIU did not finish the restore within %s (%s) and was killed", e.limit, config.EnvRestoreTimeout)
}

func (e *deadlineError) Unwrap() []error {
	if e.err == nil {
		return []error{ErrRestoreDeadline}
	}
	return []error{ErrRestoreDeadline, e.err}
}

// restoreLimitKey holds, in a context, the whole restore's deadline
// (WithRestoreDeadline).
type restoreLimitKey struct{}

// Deadline is a whole restore's deadline: Limit after Since.
type Deadline struct {
	Since time.Time
	Limit time.Duration
}

// At is when the deadline passes.
func (d Deadline) At() time.Time { return d.Since.Add(d.Limit) }

// WithRestoreDeadline is ctx ending at d, with ErrRestoreDeadline as its
// cause: one deadline for the whole restore, set where it begins (a
// shim's Create, `cryo image restore`) and carried through the fetch, the
// unpack, CRIU and the CUDA resume. A zero Limit sets none.
func WithRestoreDeadline(ctx context.Context, d Deadline) (context.Context, context.CancelFunc) {
	if d.Limit <= 0 {
		return context.WithCancel(ctx)
	}
	ctx = context.WithValue(ctx, restoreLimitKey{}, d)
	return context.WithDeadlineCause(ctx, d.At(), ErrRestoreDeadline)
}

// RestoreDeadline is the deadline WithRestoreDeadline set on ctx.
func RestoreDeadline(ctx context.Context) (Deadline, bool) {
	d, ok := ctx.Value(restoreLimitKey{}).(Deadline)
	return d, ok
}

// RestoreLimit is the limit of ctx's RestoreDeadline, else def.
func RestoreLimit(ctx context.Context, def time.Duration) time.Duration {
	if d, ok := RestoreDeadline(ctx); ok {
		return d.Limit
	}
	return def
}

// PastDeadline reports whether err came of ctx's restore deadline.
func PastDeadline(ctx context.Context, err error) bool {
	return err != nil && (errors.Is(err, ErrRestoreDeadline) || errors.Is(context.Cause(ctx), ErrRestoreDeadline))
}

// pastDeadlineIn words err of stage as the whole restore's deadline when
// that is what ended it: a report of the stage keeps its step and
// outcome, with the deadline as its cause and remedy.
func pastDeadlineIn(ctx context.Context, stage string, err error) error {
	d, ok := RestoreDeadline(ctx)
	if !ok || !PastDeadline(ctx, err) {
		return err
	}
	var se *report.StepError
	if errors.As(err, &se) {
		se.Err, se.Remedy = DeadlineExceededIn(stage, d.Limit, se.Err), RestoreDeadlineRemedy
		return err
	}
	return DeadlineExceededIn(stage, d.Limit, err)
}

// restoreWithin runs a front end's restore with the restore's deadline
// (none where limit is zero: a Config built by hand); a whole restore's
// deadline set on ctx (WithRestoreDeadline) bounds it too.
func restoreWithin(ctx context.Context, limit time.Duration, restore func(context.Context) (int, error)) (int, error) {
	if limit <= 0 {
		limit = RestoreLimit(ctx, 0)
	}
	if limit <= 0 {
		return restore(ctx)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, limit, ErrRestoreDeadline)
	defer cancel()
	pid, err := restore(ctx)
	if err != nil && errors.Is(context.Cause(ctx), ErrRestoreDeadline) {
		return 0, RestoreDeadlineExceeded(RestoreLimit(ctx, limit), err)
	}
	return pid, err
}
