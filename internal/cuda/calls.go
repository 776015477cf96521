package cuda

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// Probe loads the driver library and reports its version and whether it
// has the checkpoint API. Without the API it returns the info together with
// an error wrapping ErrNoCheckpointAPI that names the driver needed.
func (d *Driver) Probe(ctx context.Context) (DriverInfo, error) {
	rep, err := d.call(ctx, request{Op: opProbe, Lib: d.libPath()}, d.callTimeout())
	if rep.Info != nil {
		return *rep.Info, err
	}
	return DriverInfo{LibPath: d.libPath()}, err
}

// Lock locks pid's CUDA state (running → locked), waiting for in-flight
// work; timeout is the driver's own timeoutMs (≤ 0: 10s). The helper's
// deadline is CallTimeout, stretched to outlast timeout by one second.
func (d *Driver) Lock(ctx context.Context, pid int, timeout time.Duration) error {
	timeout = positive(timeout, defaultLockTimeout)
	ms := min(timeout.Milliseconds(), math.MaxUint32)
	deadline := max(d.callTimeout(), timeout+time.Second)
	_, err := d.pidCall(ctx, request{Op: opLock, PID: pid, TimeoutMs: uint32(ms)}, deadline)
	return err
}

// Checkpoint copies pid's GPU memory into its host memory and releases
// the GPU (locked → checkpointed). Bounded by CopyTimeout.
func (d *Driver) Checkpoint(ctx context.Context, pid int) error {
	_, err := d.pidCall(ctx, request{Op: opCkpt, PID: pid}, d.copyTimeout())
	return err
}

// Restore brings pid's GPU memory back (checkpointed → locked), remapping
// GPUs by pairs. Bounded by CopyTimeout.
func (d *Driver) Restore(ctx context.Context, pid int, pairs []GPUPair) error {
	if _, err := pairBytes(pairs); err != nil {
		return fmt.Errorf("%s: %w", describe(opRestore, pid), err)
	}
	_, err := d.pidCall(ctx, request{Op: opRestore, PID: pid, Pairs: pairs}, d.copyTimeout())
	return err
}

// Unlock lets pid run CUDA work again (locked → running).
func (d *Driver) Unlock(ctx context.Context, pid int) error {
	_, err := d.pidCall(ctx, request{Op: opUnlock, PID: pid}, d.callTimeout())
	return err
}

// State asks the driver for pid's checkpoint state.
//
// The driver (580) answers no query about a process whose restore thread
// is stopped, so a process in a group stop (as cryo holds a suspended one)
// is asked with that thread alone let run, and left stopped.
func (d *Driver) State(ctx context.Context, pid int) (State, error) {
	settle(pid)
	held := stopped(pid)
	rep, err := d.pidCall(ctx, request{Op: opState, PID: pid, Hold: held}, d.callTimeout())
	if err != nil && !held && stopped(pid) {
		// The process stopped while it was asked (a CRIU that failed its
		// dump hands the threads back to their group stop as it exits):
		// its restore thread could not answer. Ask again, letting it run.
		rep, err = d.pidCall(ctx, request{Op: opState, PID: pid, Hold: true}, d.callTimeout())
	}
	if err != nil {
		return StateFailed, err
	}
	s := State(rep.State)
	if s < StateRunning || s > StateFailed {
		return StateFailed, fmt.Errorf("%s: the driver reported unknown state %d: %w", describe(opState, pid), rep.State, ErrDriver)
	}
	return s, nil
}

// RestoreThreadID returns the thread of pid that the driver uses to
// restore it (CRIU's CUDA plugin needs it).
func (d *Driver) RestoreThreadID(ctx context.Context, pid int) (int, error) {
	rep, err := d.pidCall(ctx, request{Op: opTID, PID: pid}, d.callTimeout())
	return rep.TID, err
}

// Inventory lists the GPUs and the driver through NVML, in the helper.
func (d *Driver) Inventory(ctx context.Context) (Inventory, error) {
	rep, err := d.call(ctx, request{Op: opInventory, NVML: d.nvmlPath()}, d.callTimeout())
	if err != nil {
		return Inventory{}, err
	}
	return *rep.Inv, nil
}

// pidCall runs a per-process call, checking first that pid exists: the
// driver's answer for a missing pid does not say so clearly.
func (d *Driver) pidCall(ctx context.Context, req request, timeout time.Duration) (reply, error) {
	if err := checkAlive(req.Op, req.PID); err != nil {
		return reply{}, err
	}
	req.Lib = d.libPath()
	rep, err := d.call(ctx, req, timeout)
	if err != nil {
		if gone := checkAlive(req.Op, req.PID); gone != nil {
			return rep, fmt.Errorf("%w (driver: %w)", gone, err)
		}
	}
	return rep, err
}

// settleWait bounds settle: a tracer that does not let go by then is not
// one that is exiting (a debugger, another tool), and the call goes on.
const settleWait = 2 * time.Second

// settle waits, briefly, until no tracer holds pid's threads. A CRIU that
// has just answered cryo is still exiting, and its tracees pass through
// their ptrace stops back to where they were (running, or the group stop
// of a held process): whether a call must hold the process is only known
// once they are there.
func settle(pid int) {
	for deadline := time.Now().Add(settleWait); procfs.Tracer(pid) != 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}
