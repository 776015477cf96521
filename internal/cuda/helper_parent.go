package cuda

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
)

// helperExe is the binary re-executed as the helper: the running binary
// itself, whose main chooses RunHelper when it sees config.EnvHelper.
const helperExe = "/proc/self/exe"

// call runs req in a fresh helper process and waits for its reply, at most
// timeout and never past ctx. At the deadline the helper's whole process
// group gets SIGKILL, so a hung driver call cannot hang the caller.
func (d *Driver) call(ctx context.Context, req request, timeout time.Duration) (reply, error) {
	if err := ctx.Err(); err != nil {
		return reply{}, fmt.Errorf("%s: %w", describe(req.Op, req.PID), err)
	}
	if req.heldAction() {
		// Not cancelled (see waitHelper), but a deadline of ctx's is one.
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
			timeout = time.Until(dl)
		}
		req.DeadlineMs = time.Now().Add(timeout).UnixMilli()
	}
	in, err := json.Marshal(req)
	if err != nil {
		return reply{}, err
	}
	// Pdeathsig fires when the forking thread exits, not the process: keep
	// this goroutine on one thread until the helper is gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: 4096}
	cmd := d.helperCommand(in, &stdout, stderr, !req.heldAction() || d.opts.DieWithCaller)
	if err := cmd.Start(); err != nil {
		return reply{}, fmt.Errorf("%s: start helper %s: %w", describe(req.Op, req.PID), helperExe, err)
	}
	werr := waitHelper(ctx, cmd, req, timeout)
	var exit *helperExit
	if werr != nil && !errors.As(werr, &exit) {
		return reply{}, werr
	}
	return decodeReply(req, stdout.Bytes(), stderr.String(), exit)
}

// helperCommand: withUs, the helper dies with its caller; a held action
// does not (see request.heldAction).
func (d *Driver) helperCommand(in []byte, stdout, stderr interface{ Write([]byte) (int, error) }, withUs bool) *exec.Cmd {
	cmd := exec.Command(helperExe)
	cmd.Args = []string{"cryo-cuda-helper"}
	env := d.opts.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(hostView(env), config.EnvHelper+"=1")
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	// Its own session (and so its own process group), so that the kill
	// reaches anything the driver started, and no signal meant for cryo
	// (a terminal's ^C or hangup, a supervisor's SIGTERM to cryo's group)
	// reaches it: cryo decides what those mean. It dies with us should we
	// die first, unless it holds a process's threads (see heldAction).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if withUs {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	cmd.WaitDelay = time.Second
	return cmd
}

// waitHelper waits for the helper to exit, killing it at the deadline.
func waitHelper(ctx context.Context, cmd *exec.Cmd, req request, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	kill := func() {
		if req.heldAction() {
			// Stopped first: the helper's death detaches its tracees,
			// and the group stop it had lifted must hold them.
			_ = syscall.Kill(req.PID, syscall.SIGSTOP)
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	cancelled := ctx.Done()
	if req.heldAction() {
		// Not interrupted: killed mid-action, it would leave the process
		// half checkpointed (or restored). The caller rolls back once it
		// has ended, within its deadline.
		cancelled = nil
	}
	select {
	case err := <-done:
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // leftovers, if any
		if err != nil {
			return &helperExit{err: err}
		}
		return nil
	case <-timer.C:
		kill()
		return timeoutError(req, timeout)
	case <-cancelled:
		kill()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w (%w)", timeoutError(req, timeout), ctx.Err())
		}
		return fmt.Errorf("%s: helper killed: %w", describe(req.Op, req.PID), ctx.Err())
	}
}

// helperExit is a helper that exited abnormally; decodeReply explains it.
type helperExit struct{ err error }

func (h *helperExit) Error() string { return h.err.Error() }

func timeoutError(req request, timeout time.Duration) error {
	// The remedy is the front end's (its lock timeout, its thaw): the
	// cause says only what happened.
	return fmt.Errorf("%s: no answer within %s, helper killed (the GPU work did not drain, or the process is stopped, or frozen and needs a thaw): %w",
		describe(req.Op, req.PID), timeout, ErrTimeout)
}

// decodeReply parses the helper's answer into a reply or a typed error.
func decodeReply(req request, out []byte, stderr string, exit *helperExit) (reply, error) {
	var rep reply
	if err := json.Unmarshal(out, &rep); err != nil {
		why := err.Error()
		if exit != nil {
			why = exit.Error()
		}
		return reply{}, fmt.Errorf("%s: the helper died without an answer (%s): %w; its output: %q",
			describe(req.Op, req.PID), why, ErrDriver, strings.TrimSpace(stderr))
	}
	if rep.Err != nil {
		return rep, rep.Err.toError(req.Op, req.PID)
	}
	return rep, nil
}

// describe names a call in messages: "cuda lock pid 42" or "cuda probe".
func describe(op string, pid int) string {
	if pid == 0 {
		return "cuda " + op
	}
	return fmt.Sprintf("cuda %s pid %d", op, pid)
}

// tailBuffer keeps the last max bytes written: the end of the helper's
// stderr is what explains a crash.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// hostView is env without CUDA_VISIBLE_DEVICES:
// the helper's libcuda and NVML must see every GPU of the host, whatever
// the shell that ran cryo narrowed its own programs to. With
// CUDA_VISIBLE_DEVICES=0 inherited, the inventory lacked the host's other
// GPU, so a process that held both GPUs' device files was recorded with
// one, and the driver then failed its restore (measured on 2x H100).
func hostView(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
