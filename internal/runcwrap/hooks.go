package runcwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/internal/bundle"
	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// hooksOf reads the container's hooks from its bundle's annotations
// (cryo.io/pre-checkpoint, cryo.io/post-restore): Podman passes a
// container's --annotation there, as CRI passes a pod's.
func (w *wrapper) hooksOf(id, bundleDir, op string) (pre, post *orchestrate.Hook, err error) {
	h, err := hook.FromAnnotations(bundle.Annotations(bundleDir))
	if err != nil {
		return nil, nil, &report.StepError{Op: op, ID: id, Step: "read the hooks", Err: err,
			Outcome: "nothing was done: the container runs on as it was",
			Remedy:  "fix the container's hook annotation: " + hook.Syntax}
	}
	as := func(s *hook.Spec) *orchestrate.Hook {
		if s == nil {
			return nil
		}
		return &orchestrate.Hook{Spec: *s, Exec: w.execIn(id)}
	}
	return as(h.Pre), as(h.Post), nil
}

// execIn runs a command in the container through the real runc's exec,
// which takes the container's own process spec (user, capabilities,
// seccomp, no_new_privs, cgroup, namespaces) with the arguments replaced:
// the hook has the container's rights, never more.
func (w *wrapper) execIn(id string) hook.Exec {
	return func(ctx context.Context, _ int, argv []string) (int, []byte, error) {
		args := append(append(w.cli.quiet(), "exec", id), argv...)
		cmd := exec.CommandContext(ctx, w.cli.path, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// runc forwards the signals it gets to the command: a SIGTERM
		// ends both, where a SIGKILL would orphan the command.
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ctx.Err() == nil {
			return ee.ExitCode(), out.Bytes(), nil
		}
		if err != nil {
			return 0, out.Bytes(), fmt.Errorf("runc exec in %s: %w", id, err)
		}
		return 0, out.Bytes(), nil
	}
}
