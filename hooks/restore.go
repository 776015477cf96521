package hooks

import (
	"context"
	"errors"

	cryoruntime "github.com/cryo-gpu/cryo/runtime"
	"github.com/cryo-gpu/cryo/snapshot"
)

// preRestore runs before CRIU restores anything: the manifest's digests and
// GPU needs are checked, and a failure aborts the restore.
func preRestore(ctx context.Context, o *cryoruntime.Orchestrator) error {
	dir, err := imageDir()
	if err != nil {
		return err
	}
	// CRIU does not say which spec the container restores with; the GPUs
	// are matched after the restore, to the nodes its /dev then has.
	_, err = o.CheckRestore(ctx, containerID(), dir, cryoruntime.GPUScope{Deferred: true})
	return err
}

// postResume runs once the restored processes run again: CUDA is resumed in
// them. (At post-restore they are still stopped by CRIU.)
func postResume(ctx context.Context, o *cryoruntime.Orchestrator) error {
	pid, err := initPID()
	if err != nil {
		return err
	}
	dir, err := imageDir()
	if err != nil {
		return err
	}
	m, err := snapshot.Read(dir)
	if errors.Is(err, snapshot.ErrNoManifest) {
		return nil
	}
	if err != nil {
		return err
	}
	t := cryoruntime.Target{
		ID:      containerID(),
		PIDs:    func(context.Context) ([]int, error) { return cryoruntime.ProcessTree(pid) },
		Scope:   cryoruntime.GPUScope{Deferred: true},
		InitPID: pid,
	}
	return o.ResumeRestored(ctx, t, m)
}
