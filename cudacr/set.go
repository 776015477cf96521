package cudacr

import (
	"fmt"
	"time"
)

// A set operation moves every member (one CUDA process) through the
// driver's state machine, one driver call at a time: parallel callers hung
// driver 580.
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

type member struct {
	pid   int
	state State
}

func members(pids []int, s State) []*member {
	var ms []*member
	for _, p := range unique(pids) {
		ms = append(ms, &member{pid: p, state: s})
	}
	return ms
}

// step runs one driver call for m, reporting its start and end, and moves
// m to `to` on success, or to unknown on failure.
func (d *Driver) step(m *member, name string, to State, o SetOptions, call func() error) error {
	report(o, Progress{PID: m.pid, Step: name})
	start := time.Now()
	err := call()
	report(o, Progress{PID: m.pid, Step: name, Done: true, Elapsed: time.Since(start), Err: err})
	if err != nil {
		m.state = stateUnknown
		return fmt.Errorf("pid %d: %s: %w", m.pid, name, err)
	}
	m.state = to
	return nil
}

func report(o SetOptions, p Progress) {
	if o.OnProgress != nil {
		o.OnProgress(p)
	}
}
