package cudacr

// TEMPORARY stub so that other packages compile while cudacr is written.
// The cudacr owner replaces this file.

import (
	"context"
	"errors"
	"time"
)

var errTODO = errors.New("cudacr: not implemented yet")

// Driver runs every call of the CUDA checkpoint API in a helper child process.
type Driver struct{ opts Options }

// New returns a Driver; it loads nothing until a call is made.
func New(opts Options) *Driver { return &Driver{opts: opts} }

func (d *Driver) Probe(ctx context.Context) (DriverInfo, error)                  { return DriverInfo{}, errTODO }
func (d *Driver) Lock(ctx context.Context, pid int, timeout time.Duration) error { return errTODO }
func (d *Driver) Checkpoint(ctx context.Context, pid int) error                  { return errTODO }
func (d *Driver) Restore(ctx context.Context, pid int, pairs []GPUPair) error    { return errTODO }
func (d *Driver) Unlock(ctx context.Context, pid int) error                      { return errTODO }
func (d *Driver) State(ctx context.Context, pid int) (State, error)              { return 0, errTODO }
func (d *Driver) RestoreThreadID(ctx context.Context, pid int) (int, error)      { return 0, errTODO }
func (d *Driver) Inventory(ctx context.Context) (Inventory, error)               { return Inventory{}, errTODO }

// Find returns the CUDA processes among pids, and the ones it skipped and why.
func (d *Driver) Find(ctx context.Context, pids []int) ([]Process, []Skipped, error) {
	return nil, nil, errTODO
}

// Suspend locks and checkpoints every pid, in order; on any failure it rolls
// the already-suspended ones back to running and returns the first error.
func (d *Driver) Suspend(ctx context.Context, pids []int, o SetOptions) error { return errTODO }

// Resume restores and unlocks every pid (remapping o.GPUPairs).
func (d *Driver) Resume(ctx context.Context, pids []int, o SetOptions) error { return errTODO }

// PIDsOfCgroup lists the processes of a cgroup directory (v1 or v2), recursively.
func PIDsOfCgroup(dir string) ([]int, error) { return nil, errTODO }
