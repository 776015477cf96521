package runcwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"

	cryoruntime "github.com/cryo-gpu/cryo/runtime"
)

// runcCLI queries the real runc about a container, with the same global
// flags (--root, --systemd-cgroup, …) as the command being wrapped, so that
// it looks in the same state directory.
type runcCLI struct {
	path    string
	globals []string
}

// output runs runc with args and returns its stdout; stderr goes into the error.
func (r runcCLI) output(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.path, append(append([]string{}, r.quiet()...), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("runc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
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
	out, err := r.output(ctx, "ps", "--format", "json", id)
	if err != nil {
		return nil, err
	}
	var pids []int
	if err := json.Unmarshal(out, &pids); err != nil {
		return nil, fmt.Errorf("runc ps %s: %w", id, err)
	}
	return cryoruntime.WithTree(pids, r.initPID(ctx, id)), nil
}

// initPID is the container's init as runc reports it (0 if unknown).
func (r runcCLI) initPID(ctx context.Context, id string) int {
	out, err := r.output(ctx, "state", id)
	if err != nil {
		return 0
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if json.Unmarshal(out, &st) != nil {
		return 0
	}
	return st.Pid
}

// status is the container's state: "created", "running", "paused", "stopped".
func (r runcCLI) status(ctx context.Context, id string) (string, error) {
	out, err := r.output(ctx, "state", id)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return "", fmt.Errorf("runc state %s: %w", id, err)
	}
	return st.Status, nil
}

// target describes the container to the orchestration. Thaw is set only
// when the container is paused: the driver cannot lock frozen threads.
func (r runcCLI) target(ctx context.Context, id string) (cryoruntime.Target, error) {
	t := cryoruntime.Target{
		ID:   id,
		PIDs: func(ctx context.Context) ([]int, error) { return r.pids(ctx, id) },
	}
	st, err := r.status(ctx, id)
	if err != nil {
		return t, err
	}
	if st == "paused" {
		t.Thaw = func(ctx context.Context) error {
			_, err := r.output(ctx, "resume", id)
			return err
		}
	}
	return t, nil
}
