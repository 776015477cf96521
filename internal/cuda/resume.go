package cuda

import (
	"context"
	"errors"
)

// Resume restores (remapping o.GPUPairs) and then unlocks every pid. It
// starts from whatever state the driver reports, so it is idempotent and
// also repairs a set that a killed caller left locked: checkpointed →
// restore + unlock, locked → unlock, running → nothing. It tries every pid
// even when one fails, and returns all the failures joined.
func (d *Driver) Resume(ctx context.Context, pids []int, o SetOptions) error {
	return d.bringUp(ctx, members(pids, stateUnknown), o)
}

// bringUp moves every member to running, in phases (see set.go).
func (d *Driver) bringUp(ctx context.Context, ms []*member, o SetOptions) error {
	// learn sets aside the members it cannot ask; they stay unknown and
	// are skipped by the phases below.
	errs := []error{d.learn(ctx, ms, o)}
	errs = append(errs, phase(ms, StateCheckpointed, o, func(m *member) error {
		m.held = m.held || stopped(m.pid)
		restore := func() error { return d.Restore(ctx, m.pid, o.pairs(m.pid)) }
		if m.held {
			restore = func() error { return d.restoreHeld(ctx, m.pid, o.pairs(m.pid)) }
		}
		return d.step(m, stepRestore, StateLocked, o, restore)
	}))
	errs = append(errs, phase(ms, StateLocked, o, func(m *member) error {
		m.held = m.held || stopped(m.pid)
		unlock := func() error { return d.Unlock(ctx, m.pid) }
		if m.held {
			unlock = func() error { return d.unlockHeld(ctx, m.pid) }
		}
		return d.step(m, stepUnlock, StateRunning, o, unlock)
	}))
	// Only once every member has its GPU state back and is unlocked do
	// their threads run again (a member the driver reports running but
	// that is still stopped was left so by a cryo that died after its
	// unlock).
	errs = append(errs, phase(ms, StateRunning, o, func(m *member) error { return release(m.pid, m.held) }))
	return errors.Join(errs...)
}

// pairs returns the GPU pairs for pid's restore.
func (o SetOptions) pairs(pid int) []GPUPair {
	if p, ok := o.PIDPairs[pid]; ok {
		return p
	}
	return o.GPUPairs
}
