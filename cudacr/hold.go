package cudacr

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// withRestoreThread runs a driver action on pid (its checkpoint, restore
// or unlock) with every thread of the process stopped but the driver's
// restore thread, which runs with its signals blocked during the action
// alone. The process is left stopped (see stopworld.go): it runs again
// only at release, once its GPU state is back.
func (d *Driver) withRestoreThread(ctx context.Context, pid int, action func() error) error {
	tid, err := d.RestoreThreadID(ctx, pid)
	if err != nil {
		return fmt.Errorf("ask the driver for the restore thread: %w", err)
	}
	w, err := stopWorld(ctx, pid)
	if err != nil {
		return err
	}
	defer w.detach()
	if err := w.run(tid); err != nil {
		return err
	}
	aerr := action()
	return errors.Join(aerr, w.hold(context.WithoutCancel(ctx), tid))
}

// checkpointHeld is Checkpoint with the process's threads held.
func (d *Driver) checkpointHeld(ctx context.Context, pid int) error {
	return d.withRestoreThread(ctx, pid, func() error { return d.Checkpoint(ctx, pid) })
}

// restoreHeld is Restore with the process's threads held.
func (d *Driver) restoreHeld(ctx context.Context, pid int, pairs []GPUPair) error {
	return d.withRestoreThread(ctx, pid, func() error { return d.Restore(ctx, pid, pairs) })
}

// unlockHeld is Unlock with the process's threads held.
func (d *Driver) unlockHeld(ctx context.Context, pid int) error {
	return d.withRestoreThread(ctx, pid, func() error { return d.Unlock(ctx, pid) })
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
