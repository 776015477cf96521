package runtime

// TEMPORARY stub so that the shim compiles while runtime is written.
// The runtime owner replaces this file.

import (
	"context"
	"errors"

	"github.com/cryo-gpu/cryo/cudacr"
	"github.com/cryo-gpu/cryo/snapshot"
)

// Target is the process set a checkpoint or restore acts on.
type Target struct {
	ID   string                                   // container id (or "pid N"), used in messages
	PIDs func(ctx context.Context) ([]int, error) // the processes, host pids
	Thaw func(ctx context.Context) error          // unfreezes the cgroup; nil if never frozen
}

// Orchestrator is cryo's one checkpoint/restore sequence.
type Orchestrator struct {
	Driver *cudacr.Driver
}

// Checkpoint thaws, suspends CUDA, writes the manifest into imageDir, calls
// dump, then resumes CUDA (leaveRunning) or leaves it suspended for exit.
// On any failure it resumes CUDA and returns an error naming the step.
func (o *Orchestrator) Checkpoint(ctx context.Context, t Target, imageDir string, leaveRunning bool, dump func(ctx context.Context) error) (*snapshot.Manifest, error) {
	return nil, errors.New("runtime: not implemented yet")
}

// CheckRestore reads the manifest in imageDir, verifies digests and that this
// host can take it, before anything is restored.
func (o *Orchestrator) CheckRestore(ctx context.Context, id, imageDir string) (*snapshot.Manifest, error) {
	return nil, errors.New("runtime: not implemented yet")
}

// ResumeRestored resumes CUDA in the restored processes.
func (o *Orchestrator) ResumeRestored(ctx context.Context, t Target, m *snapshot.Manifest) error {
	return errors.New("runtime: not implemented yet")
}
