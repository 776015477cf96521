package orchestrate

import (
	"errors"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/report"
)

// One owner per target: every checkpoint or restore holds a lock on its
// target (package lock) for its whole run, in the directory every front
// end shares.

// LockTarget locks the target id for op ("checkpoint", "restore"). A
// front end whose run spans several entry points (a restore: check, runc
// restore, CUDA resume) takes it first and hands it to each of them, as
// Target.Lock or Restorer.Lock: they use it instead of taking their own.
// It fails at once with a *lock.BusyError if another run holds it.
func (o *Orchestrator) LockTarget(op, id string) (*lock.Lock, error) {
	return lock.Target(o.lockDir(), op, id)
}

// LockPIDs locks only pids, for a run on processes without a container
// (`cryo cuda suspend`): it collides with any checkpoint or restore that
// holds one of them.
func (o *Orchestrator) LockPIDs(op string, pids []int) (*lock.Lock, error) {
	return lock.PIDs(o.lockDir(), op, pids)
}

// lockFor returns held, the front end's lock for the whole run, or takes
// one for id; release is a no-op for a lock it did not take.
func (o *Orchestrator) lockFor(held *lock.Lock, op, id string) (*lock.Lock, func(), error) {
	return lock.For(held, o.lockDir(), op, id)
}

// lockDir is where every front end meets: the configured directory
// ($CRYO_LOCK_DIR), else /run/cryo/locks.
func (o *Orchestrator) lockDir() string {
	if o.Config.LockDir != "" {
		return o.Config.LockDir
	}
	return config.DefaultLockDir
}

// lockError is a failed lock as a *StepError: a busy target was left
// exactly as it was.
func (o *Orchestrator) lockError(op, id string, err error) *report.StepError {
	e := &report.StepError{Op: op, ID: id, Step: StepLock, Err: err, Outcome: "nothing was done, the processes were not touched"}
	if errors.Is(err, lock.ErrBusy) {
		e.Remedy = "wait for that run to finish, then retry"
	} else {
		e.Remedy = "check that " + o.lockDir() + " (or $" + config.EnvLockDir + ") is a writable directory"
	}
	return e
}
