package shim

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/process"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/runc"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	gorunc "github.com/containerd/go-runc"
	"github.com/containerd/typeurl/v2"
)

// runcDump is the dump: `runc checkpoint` of the task, as the runc
// service's Checkpoint runs it (the task's runc root, cgroup driver and
// binary, the request's options), with one difference: runc, and so its
// CRIU, starts in a process group of its own. The runc service starts
// runc in the shim's group, where a signal to that group (an admin's
// `kill -TERM -PGID`, a supervisor stopping the shim) stopped CRIU
// mid-dump, its parasite inside the workload. With a group of its own
// the signal reaches the shim alone, which finishes the checkpoint before
// it stops (stopping.go). runc keeps the runc service's death signal: a
// shim that is killed takes runc along, and CRIU, which is not runc's by
// that signal, ends or fails its dump on its own while the shim's
// `delete` kills the task (deadcheckpoint.go).
func (s *service) runcDump(ctx context.Context, run *checkpointRun) error {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return err
	}
	opts, err := runc.ReadOptions(run.bundle)
	if err != nil || opts == nil {
		opts = &options.Options{}
	}
	rc := process.NewRunc(opts.Root, run.bundle, ns, opts.BinaryName, opts.SystemdCgroup)
	rc.Setpgid = true
	var co options.CheckpointOptions
	if run.req.Options != nil {
		if err := typeurl.UnmarshalTo(run.req.Options, &co); err != nil {
			return err
		}
	}
	var actions []gorunc.CheckpointAction
	if !co.Exit {
		actions = append(actions, gorunc.LeaveRunning)
	}
	// criuWorkInImage has set a work directory: CRIU's log stays there.
	err = rc.Checkpoint(ctx, run.req.ID, &gorunc.CheckpointOpts{
		WorkDir:                  co.WorkPath,
		ImagePath:                run.req.Path,
		AllowOpenTCP:             co.OpenTcp,
		AllowExternalUnixSockets: co.ExternalUnixSockets,
		AllowTerminal:            co.Terminal,
		FileLocks:                co.FileLocks,
		EmptyNamespaces:          co.EmptyNamespaces,
	}, actions...)
	if err != nil {
		// The runc service's wording: the first line, then CRIU's log.
		first, _, _ := strings.Cut(err.Error(), "\n")
		return fmt.Errorf("%s path= %s: %w", first, filepath.Join(co.WorkPath, "dump.log"), err)
	}
	return nil
}
