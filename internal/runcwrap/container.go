package runcwrap

import (
	"context"
	"fmt"

	gorunc "github.com/containerd/go-runc"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// runcCLI queries the real runc about a container, with the same global
// flags (--root, --systemd-cgroup, …) as the command being wrapped, so that
// it looks in the same state directory.
type runcCLI struct {
	path    string
	globals []string
}

// runc is go-runc on the real binary, with the wrapped command's global
// flags less the log ones.
func (r runcCLI) runc() *gorunc.Runc {
	return &gorunc.Runc{Command: r.path, ExtraArgs: r.quiet()}
}

// quiet is the global flags without --log/--log-format, so that the queries
// print their errors to us rather than into the caller's log file.
func (r runcCLI) quiet() []string {
	var out []string
	for i := 0; i < len(r.globals); i++ {
		name, _, has := splitFlag(r.globals[i])
		if name == "log" || name == "log-format" {
			if !has {
				i++
			}
			continue
		}
		out = append(out, r.globals[i])
	}
	return out
}

// pids lists the container's processes (host pids), from its cgroup.
func (r runcCLI) pids(ctx context.Context, id string) ([]int, error) {
	pids, err := r.runc().Ps(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("runc ps %s: %w", id, err)
	}
	return orchestrate.WithTree(pids, r.initPID(ctx, id)), nil
}

// initPID is the container's init as runc reports it (0 if unknown).
func (r runcCLI) initPID(ctx context.Context, id string) int {
	st, err := r.runc().State(ctx, id)
	if err != nil {
		return 0
	}
	return st.Pid
}

// status is the container's state: "created", "running", "paused", "stopped".
func (r runcCLI) status(ctx context.Context, id string) (string, error) {
	st, err := r.runc().State(ctx, id)
	if err != nil {
		return "", fmt.Errorf("runc state %s: %w", id, err)
	}
	return st.Status, nil
}

// target describes the container to the orchestration. Thaw is set only
// when the container is paused: the driver cannot lock frozen threads.
func (r runcCLI) target(ctx context.Context, id string) (orchestrate.Target, error) {
	t := orchestrate.Target{
		ID:   id,
		PIDs: func(ctx context.Context) ([]int, error) { return r.pids(ctx, id) },
		// runc asks CRIU to freeze the container's cgroup for the dump.
		DumpFreezes: true,
	}
	st, err := r.status(ctx, id)
	if err != nil {
		return t, err
	}
	if st == "paused" {
		t.Thaw = func(ctx context.Context) error { return r.runc().Resume(ctx, id) }
	}
	return t, nil
}
