package cuda

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// A set operation moves every member (one CUDA process) through the
// driver's state machine in phases:
//
//	from          step         to            way back
//	running       lock         locked        unlock
//	locked        checkpoint   checkpointed  restore, then unlock
//	checkpointed  restore      locked        (checkpoint)
//	locked        unlock       running       (lock)
//	unknown       state query  as reported   —
//	failed        —            —             none: the GPU state is lost
//
// A failed step leaves its member unknown (a killed helper may have
// completed the call or not); the way back first asks the driver.
//
// Suspend locks every member, then checkpoints every member: no process
// is copied while another can still run work against it. Resume restores
// every member, then unlocks every member, so that none runs before all
// have their memory back.
//
// Within a phase the members' calls run in parallel, each in its own helper
// process with its own deadline. The copies of a checkpoint or restore are
// bound by the kernel faulting in the process's host memory, one CPU per
// process, so N processes suspend in about the time of one (4 × 4 GiB on
// an H200: 2.8 s instead of 11.3 s). A phase ends when every call of it has
// returned or been killed at its deadline, so no failure leaves a call
// running behind the rollback.

// stateUnknown marks a member whose last step failed.
const stateUnknown State = -1

// Step names, as in Progress.Step and in errors.
const (
	stepLock    = "lock"
	stepCkpt    = "checkpoint"
	stepRestore = "restore"
	stepUnlock  = "unlock"
	stepState   = "state"
)

// maxParallel caps the calls of one phase that run at once by default.
const maxParallel = 16

type member struct {
	pid   int
	state State
	// mine: this call has moved the member, or may have (a failed call
	// other than the driver's "wrong state" refusal may have taken effect).
	// A rollback touches only such members.
	mine bool
	// held: the process is stopped by cryo's hold (stopworld.go), so its
	// restore and unlock run held and it is released at the end.
	held bool
}

func members(pids []int, s State) []*member {
	var ms []*member
	for _, p := range unique(pids) {
		ms = append(ms, &member{pid: p, state: s})
	}
	return ms
}

// phase runs do for every member in state from, at most o.Parallel (default
// maxParallel) at a time, and returns every failure joined, in member order.
// do touches only its own member, so the members need no lock.
func phase(ms []*member, from State, o SetOptions, do func(m *member) error) error {
	limit := o.Parallel
	if limit <= 0 || limit > maxParallel {
		limit = maxParallel
	}
	errs := make([]error, len(ms))
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i, m := range ms {
		if m.state != from {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = do(m)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// step runs one driver call for m, reporting its start and end, and moves
// m to `to` on success, or to unknown on failure.
func (d *Driver) step(m *member, name string, to State, o SetOptions, call func() error) error {
	reportProgress(o, Progress{PID: m.pid, Step: name})
	start := time.Now()
	err := call()
	reportProgress(o, Progress{PID: m.pid, Step: name, Done: true, Elapsed: time.Since(start), Err: err})
	if err != nil {
		m.state = stateUnknown
		// ILLEGAL_STATE: the driver did nothing, someone else moved it.
		m.mine = m.mine || !errors.Is(err, ErrBadState)
		return fmt.Errorf("pid %d: %s: %w", m.pid, name, err)
	}
	m.state, m.mine = to, true
	return nil
}

// reportProgress calls o.OnProgress; calls of one phase report from several
// goroutines, so they are serialised here rather than in every callback.
func reportProgress(o SetOptions, p Progress) {
	if o.OnProgress != nil {
		reportMu.Lock()
		defer reportMu.Unlock()
		o.OnProgress(p)
	}
}

var reportMu sync.Mutex
