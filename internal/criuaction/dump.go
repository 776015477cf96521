package criuaction

import (
	"context"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// preDump runs before CRIU freezes the container: it suspends CUDA in the
// container's processes and writes the manifest, through the first phase
// of the one orchestration; the dump is CRIU's, once this returns. The
// processes are left suspended for CRIU; a detached watcher resumes them
// once CRIU has exited, if they still run (--leave-running, or a failed dump).
func preDump(ctx context.Context, o *orchestrate.Orchestrator) error {
	pid, err := initPID()
	if err != nil {
		return err
	}
	dir, err := imageDir()
	if err != nil {
		return err
	}
	if procfs.Frozen(pid) {
		return fmt.Errorf("the container is paused; the CUDA driver cannot suspend frozen processes: resume it, then checkpoint")
	}
	t := orchestrate.Target{
		ID:          containerID(),
		PIDs:        func(context.Context) ([]int, error) { return orchestrate.ProcessTree(pid) },
		DumpFreezes: true, // runc's CRIU, whose action script this is
	}
	// Only the first phase: CRIU dumps once this script has returned, and
	// post-dump takes the digests.
	m, err := o.BeginCheckpoint(ctx, t, dir)
	if err != nil {
		return err // the orchestration has resumed CUDA already
	}
	if !m.HasCUDA() {
		return nil
	}
	if err := startWatcher(dir, m); err != nil {
		// Without a watcher nobody would resume a --leave-running container.
		resumeNow(ctx, o, m)
		return fmt.Errorf("start the resume watcher: %w; CUDA resumed, dump aborted", err)
	}
	return nil
}

// postDump runs once CRIU has written every image: the second phase of
// the orchestration records the dump, takes the digests and writes the
// finished manifest (the first phase wrote it before the dump).
func postDump(ctx context.Context, o *orchestrate.Orchestrator) error {
	pid, _ := initPID() // without it, only the container's id is locked
	dir, err := imageDir()
	if err != nil {
		return err
	}
	t := orchestrate.Target{
		ID: containerID(),
		PIDs: func(context.Context) ([]int, error) {
			if pid <= 0 {
				return nil, nil
			}
			return orchestrate.ProcessTree(pid)
		},
	}
	_, err = o.EndCheckpoint(ctx, t, dir)
	return err
}
