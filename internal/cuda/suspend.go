package cuda

import (
	"context"
	"errors"
	"fmt"
)

// Suspend locks and then checkpoints every pid, in phases (see the table in
// set.go). Every member must be running: one already locked or
// checkpointed belongs to someone else (another checkpoint, a user's
// `cryo cuda suspend`), who will resume it; taking it over would resume it
// under them. Such a set is refused before anything is touched. If a step
// fails, the members this call moved are returned to running (restore,
// unlock), and only those; the error names the pid and the step and wraps
// the cause.
func (d *Driver) Suspend(ctx context.Context, pids []int, o SetOptions) error {
	ms := members(pids, stateUnknown)
	if err := d.learn(ctx, ms, o); err != nil {
		return fmt.Errorf("suspend: %w; nothing was suspended", err)
	}
	if err := notRunning(ms); err != nil {
		return fmt.Errorf("suspend: %w; nothing was suspended", err)
	}
	lock := positive(o.LockTimeout, defaultLockTimeout)
	if err := phase(ms, StateRunning, o, func(m *member) error {
		return d.step(m, stepLock, StateLocked, o, func() error { return d.Lock(ctx, m.pid, lock) })
	}); err != nil {
		return d.rollback(ctx, ms, o, err)
	}
	if err := phase(ms, StateLocked, o, func(m *member) error {
		// Held: from its checkpoint on, no thread of the process runs
		// until Resume has its GPU state back (stopworld.go).
		m.held = true
		return d.step(m, stepCkpt, StateCheckpointed, o, func() error { return d.checkpointHeld(ctx, m.pid) })
	}); err != nil {
		return d.rollback(ctx, ms, o, err)
	}
	// A held checkpoint is not interrupted (it would leave its process
	// half checkpointed): one asked to stop meanwhile ends, and is undone.
	if ctx.Err() != nil {
		return d.rollback(ctx, ms, o, fmt.Errorf("stopped once the checkpoint had ended: %w", context.Cause(ctx)))
	}
	return nil
}

// learn asks the driver for the state of every unknown member; a failed
// process cannot be suspended.
func (d *Driver) learn(ctx context.Context, ms []*member, o SetOptions) error {
	return phase(ms, stateUnknown, o, func(m *member) error {
		st, err := d.State(ctx, m.pid)
		if err != nil {
			return fmt.Errorf("pid %d: %s: %w", m.pid, stepState, err)
		}
		if st == StateFailed {
			return failedError(m.pid)
		}
		m.state = st
		return nil
	})
}

// notRunning refuses members that are not running.
func notRunning(ms []*member) error {
	var errs []error
	for _, m := range ms {
		if m.state != StateRunning {
			errs = append(errs, fmt.Errorf("pid %d is %s, not running: %w: another checkpoint or `cryo cuda suspend` holds it; wait for it, or run `cryo cuda resume %d`", m.pid, m.state, ErrBadState, m.pid))
		}
	}
	return errors.Join(errs...)
}

func failedError(pid int) error {
	return fmt.Errorf("pid %d: %w: the driver reports it failed and its GPU state is lost; restart the process", pid, ErrBadState)
}

// rollback returns the members this call moved to running after cause, on
// a context that survives the caller's cancellation (each call still has
// its deadline). The others are left as they are: they were not ours.
// The GPUs did not change, so no pairs; progress is still reported. It
// goes one process at a time: something already went wrong, and the
// sequential path is the one the driver has never been seen to hang on.
func (d *Driver) rollback(ctx context.Context, ms []*member, o SetOptions, cause error) error {
	rctx := context.WithoutCancel(ctx)
	ms = owned(ms)
	rb := d.bringUp(rctx, ms, SetOptions{OnProgress: o.OnProgress, Parallel: 1})
	if lost := d.LostPIDs(rctx, memberPIDs(ms), rb); rb != nil && len(lost) > 0 {
		return errors.Join(fmt.Errorf("suspend: %w", cause), LostError(lost, rb))
	}
	if rb != nil {
		return errors.Join(fmt.Errorf("suspend: %w", cause),
			fmt.Errorf("rollback left some processes suspended; run `cryo cuda resume` or restart them: %w", rb))
	}
	return fmt.Errorf("suspend: %w; %w", cause, ErrRolledBack)
}

// ErrRolledBack marks a failed Suspend whose rollback returned every
// process it had moved to running, so that a caller's report can say
// that CUDA was touched and given back, not left untouched.
var ErrRolledBack = errors.New("every process was returned to running")

// owned are the members this call moved (or may have: a call killed at its
// deadline leaves its member unknown, to be asked again).
func owned(ms []*member) []*member {
	var out []*member
	for _, m := range ms {
		if m.mine {
			out = append(out, m)
		}
	}
	return out
}

func memberPIDs(ms []*member) []int {
	pids := make([]int, len(ms))
	for i, m := range ms {
		pids[i] = m.pid
	}
	return pids
}
