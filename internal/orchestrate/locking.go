package orchestrate

import (
	"context"
	"errors"
	"log/slog"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/report"
)

// One owner per target: every checkpoint or restore holds a lock on its
// target (package lock) for its whole run, in the directory every front
// end shares.

// locker is the lock directory as the sequences use it: the targets'
// locks, and the pause records kept beside them (pauses).
type locker struct {
	dir string
	log *slog.Logger // the pause records' warnings
}

// target locks the target id for op (Orchestrator.LockTarget).
func (l locker) target(op, id string) (*lock.Lock, error) { return lock.Target(l.dir, op, id) }

// pids locks only pids for op (Orchestrator.LockPIDs).
func (l locker) pids(op string, pids []int) (*lock.Lock, error) { return lock.PIDs(l.dir, op, pids) }

// hold returns held, the front end's lock for the whole run, or takes
// one for id; release is a no-op for a lock it did not take.
func (l locker) hold(held *lock.Lock, op, id string) (*lock.Lock, func(), error) {
	return lock.For(held, l.dir, op, id)
}

// lockDir is where every front end meets: the configured directory
// ($CRYO_LOCK_DIR), else /run/cryo/locks.
func lockDir(c config.Config) string {
	if c.LockDir != "" {
		return c.LockDir
	}
	return config.DefaultLockDir
}

// refused is a failed lock as a *StepError: a busy target was left
// exactly as it was.
func (l locker) refused(op, id string, err error) *report.StepError {
	e := &report.StepError{Op: op, ID: id, Step: StepLock, Err: err, Outcome: "nothing was done, the processes were not touched"}
	if errors.Is(err, lock.ErrBusy) {
		e.Remedy = "wait for that run to finish, then retry"
	} else {
		e.Remedy = "check that " + l.dir + " (or $" + config.EnvLockDir + ") is a writable directory"
	}
	return e
}

// lockTree locks t and its processes for op before anything is touched,
// the thaw included: a second checkpoint that thawed or suspended under a
// first one would corrupt what the first one copies. The front end's lock
// (Target.Lock) is used as it is. Only a busy lock fails it: any other
// error is find's to report, with its remedy.
func lockTree(ctx context.Context, l locker, op string, t Target) (*lock.Lock, func(), error) {
	held, release, err := l.hold(t.Lock, op, t.ID)
	if err != nil {
		return nil, nil, err
	}
	pids, err := t.PIDs(ctx)
	if err == nil {
		err = held.AddPIDs(pids)
	}
	if err != nil && errors.Is(err, lock.ErrBusy) {
		release()
		return nil, nil, err
	}
	return held, release, nil
}
