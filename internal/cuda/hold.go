package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A held driver call (request.Hold) runs in the helper child, like every
// driver call: the child seizes every thread of the process, lets only the
// driver's restore thread run, its signals blocked, for the call, stops it
// again and detaches, leaving the process in its group stop (see
// stopworld.go). The tracer must be a process of its own: a tracer's ptrace
// stops are reported to every thread of its process that waits for any
// child, and the containerd shim's reaper does exactly that, so a hold
// taken inside the shim would lose them. A child killed at its deadline
// takes its tracer with it; the kernel detaches, and the group stop stays.

// heldCall is checkpointCall on a process whose threads are held: f is the
// call itself, tid the driver's restore thread. Every action runs with the
// group stop lifted (world.run), since the driver starts threads for it. A
// state query takes no lock, so it holds the threads by ptrace alone and
// leaves the process as it finds it: a group stop of its own could stop a
// process that a resume running beside it had just continued.
func heldCall(op string, pid, tid int, deadline time.Time, f func() reply) reply {
	ctx := context.Background() // the parent's deadline kills this process
	query := op == opState
	if !query && !deadline.IsZero() {
		outliveCaller(pid, deadline)
	}
	seize := stopWorld
	if query {
		seize = interruptWorld // leaves the process as it finds it
	}
	w, err := seize(ctx, pid)
	if err != nil {
		return reply{Err: holdError(err)}
	}
	defer w.detach()
	if err := w.run(tid, !query); err != nil {
		return reply{Err: holdError(err)}
	}
	rep := f()
	if err := w.hold(ctx, tid); err != nil && rep.Err == nil {
		rep.Err = holdError(err)
	}
	return rep
}

// outliveCaller arms the helper's own deadline for a held action, which
// does not die with its caller (request.heldAction): should the caller be
// gone (killed, or its machine's OOM killer), the action still ends, in a
// hold, and a hung one still ends at its deadline, the process stopped
// before this tracer's death detaches it. A caller still there does the
// same at the same moment.
func outliveCaller(pid int, deadline time.Time) {
	time.AfterFunc(time.Until(deadline), func() {
		_ = unix.Kill(pid, unix.SIGSTOP)
		os.Exit(3)
	})
}

// holdError carries a failure of the hold across the process boundary.
func holdError(err error) *wireError {
	return &wireError{Kind: kindHold, Message: err.Error()}
}

// checkpointHeld is Checkpoint with the process's threads held.
func (d *Driver) checkpointHeld(ctx context.Context, pid int) error {
	_, err := d.pidCall(ctx, request{Op: opCkpt, PID: pid, Hold: true}, d.copyTimeout())
	return err
}

// restoreHeld is Restore with the process's threads held.
func (d *Driver) restoreHeld(ctx context.Context, pid int, pairs []GPUPair) error {
	if _, err := pairBytes(pairs); err != nil {
		return fmt.Errorf("%s: %w", describe(opRestore, pid), err)
	}
	_, err := d.pidCall(ctx, request{Op: opRestore, PID: pid, Pairs: pairs, Hold: true}, d.copyTimeout())
	return err
}

// unlockHeld is Unlock with the process's threads held.
func (d *Driver) unlockHeld(ctx context.Context, pid int) error {
	_, err := d.pidCall(ctx, request{Op: opUnlock, PID: pid, Hold: true}, d.callTimeout())
	return err
}

// release lets a process that cryo holds stopped run again, once the
// driver reports it running: SIGCONT ends the group stop. held: this call
// restored or unlocked it, so cryo stopped it (the group stop may still be
// settling, and not show yet); otherwise only a process that shows stopped
// is continued (one a cryo that died after its unlock left stopped).
func release(pid int, held bool) error {
	if !held && !stopped(pid) {
		return nil
	}
	if err := unix.Kill(pid, unix.SIGCONT); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pid %d: %w: continue it: %w", pid, ErrStopWorld, err)
	}
	return nil
}

// AwaitHeld waits, up to within in all, until every pid that maps libcuda
// shows every thread in its group stop. A CUDA process comes back from a
// CRIU restore held, as it was dumped (stopped), but CRIU's last detach
// delivers the stop asynchronously: until every thread shows it, the
// process looks running, and a driver call made as if it ran would meet
// a stopped restore thread. A process that never stops (a checkpoint
// taken without the hold) costs the wait once.
func AwaitHeld(pids []int, within time.Duration) {
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		if why, err := candidate(pid); err != nil || why != "" {
			continue
		}
		for !allThreadsIn(pid, 'T') && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
	}
}
