package runcwrap

import (
	"context"
	"os"
	"path/filepath"

	gorunc "github.com/containerd/go-runc"

	"github.com/cryo-gpu/cryo/internal/leftovers"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// restoreRemoved is what a failed restore's error says became of the
// container once removeFailedRestore has run.
const restoreRemoved = "the container was removed (CRIU, the processes it restored, runc's state, mounts and cgroups)"

// runRuncUntil runs runc as runRunc does, killing it when ctx ends (the
// restore's deadline). runc's own children, CRIU first, are left to the
// clean-up: runc moved them into the container's cgroups.
func (w *wrapper) runRuncUntil(ctx context.Context, extraEnv ...string) (int, error) {
	cmd := w.runcCmd(extraEnv...)
	if err := cmd.Start(); err != nil {
		return 1, err
	}
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()
	return waitExit(cmd), nil
}

// failedRestoreCleanup is the clean-up of a failed or killed restore of o
// (see leftovers.Remove), so that Podman can remove the
// container and nothing of it stays on the host; nil when o's id is in use
// before runc runs (runc then refuses the restore, and what holds the id
// is not the restore's to remove). Call it before runc restore runs.
func (w *wrapper) failedRestoreCleanup(o crOpts, scope orchestrate.GPUScope) func(context.Context) error {
	c := leftovers.RuncContainer{
		ID: o.id, Root: w.runcRoot(), Cgroup: scope.Cgroup,
		Delete: func(ctx context.Context) error {
			return w.cli.runc().Delete(ctx, o.id, &gorunc.DeleteOpts{Force: true})
		},
	}
	if c.InUse() {
		return nil
	}
	return func(ctx context.Context) error { return leftovers.Remove(ctx, c) }
}

// runcRoot is the state directory runc uses for this command: --root, else
// runc's default.
func (w *wrapper) runcRoot() string {
	if root := w.cmd.globalValue("root"); root != "" {
		return root
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" && os.Geteuid() != 0 {
		return filepath.Join(dir, "runc")
	}
	return "/run/runc"
}
