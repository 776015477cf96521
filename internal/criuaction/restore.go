package criuaction

import (
	"context"
	"errors"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// preRestore runs before CRIU restores anything: the manifest's digests and
// GPU needs are checked, and a failure aborts the restore.
func preRestore(ctx context.Context, o *orchestrate.Orchestrator) error {
	dir, err := imageDir()
	if err != nil {
		return err
	}
	// CRIU does not say which spec the container restores with; the GPUs
	// are matched after the restore, to the nodes its /dev then has.
	_, err = o.CheckRestore(ctx, containerID(), dir, orchestrate.GPUScope{Deferred: true})
	return err
}

// postResume runs once the restored processes run again: CUDA is resumed in
// them. (At post-restore they are still stopped by CRIU.)
func postResume(ctx context.Context, o *orchestrate.Orchestrator) error {
	pid, err := initPID()
	if err != nil {
		return err
	}
	dir, err := imageDir()
	if err != nil {
		return err
	}
	m, err := manifest.Read(dir)
	if errors.Is(err, manifest.ErrNoManifest) {
		return nil
	}
	if err != nil {
		return err
	}
	t := orchestrate.Target{
		ID:      containerID(),
		PIDs:    func(context.Context) ([]int, error) { return orchestrate.ProcessTree(pid) },
		Scope:   orchestrate.GPUScope{Deferred: true},
		InitPID: pid,
	}
	return o.ResumeRestored(ctx, t, m)
}
