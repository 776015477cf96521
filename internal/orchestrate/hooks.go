package orchestrate

import (
	"context"
	"errors"
	"log/slog"

	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/report"
)

// The hook steps: a container's own actions, run by the step runner like
// every other step (announced, timed, recorded in the manifest).
const (
	// StepPreHook: the pre-checkpoint hook, before anything is suspended
	// (an inference server drops its KV cache: zeros the driver would copy).
	StepPreHook = "pre-hook"
	// StepWakeHook: the post-restore hook, run on the processes a
	// leave-running checkpoint gives back, or after a failed one whose
	// pre-checkpoint hook had run: the server that slept wakes up.
	StepWakeHook = "wake-hook"
	// StepPostHook: the post-restore hook, once the restored processes run
	// with their CUDA state.
	StepPostHook = "post-hook"
)

// Hook is a container's hook as its front end runs it.
type Hook struct {
	Spec hook.Spec
	// Exec runs an exec hook inside the container through the front
	// end's runtime; nil refuses exec hooks (hook.ErrNoExec).
	Exec hook.Exec
}

// run runs h in the container whose process pid is, logging its answer.
func (h *Hook) run(ctx context.Context, log *slog.Logger, id, name string, pid int) error {
	a, err := hook.Run(ctx, name, h.Spec, pid, h.Exec)
	if err != nil {
		return err
	}
	log.Info("cryo hook answered", "id", id, "hook", name, "spec", h.Spec.Text, "status", a.Status, "answer", a.Text, "elapsed", a.Took)
	return nil
}

// wake runs t's wake hook (the post-restore hook) on t's own processes.
// A failure is logged, not returned: the checkpoint (or its rollback) is
// what it is either way, and its outcome says, checked, whether the
// processes run; the log says the server may still sleep.
func wake(ctx context.Context, log *slog.Logger, t Target) {
	if t.Wake == nil {
		return
	}
	pid, err := firstPID(ctx, t)
	if err == nil {
		err = t.Wake.run(ctx, log, t.ID, hook.PostRestore, pid)
	}
	if err != nil {
		log.Warn("cryo hook failed: the server may still be asleep", "id", t.ID, "error", err)
	}
}

// firstPID is a process of t: its network namespace is the container's.
func firstPID(ctx context.Context, t Target) (int, error) {
	if t.InitPID > 0 {
		return t.InitPID, nil
	}
	pids, err := t.PIDs(ctx)
	if err != nil {
		return 0, err
	}
	if len(pids) == 0 {
		return 0, errNoTarget
	}
	return pids[0], nil
}

// PostHookFailed reports whether err is a restore that succeeded but for
// its post-restore hook: the processes live, as checked after the hook
// (running, or held for `cryo recover`, which the error's remedy names),
// and the front end reports the error without treating the restore as
// failed. A hook whose failure took a process with it is a failed restore.
func PostHookFailed(err error) bool {
	var se *report.StepError
	return errors.As(err, &se) && se.Step == StepPostHook && se.Fate != report.FateLost && se.Fate != report.FateLostKept
}

// preHookRemedy is the remedy of a failed pre-checkpoint hook.
func preHookRemedy(err error) string {
	if errors.Is(err, hook.ErrTimeout) {
		return "give the hook a longer deadline, or check why the server did not answer, then checkpoint again"
	}
	if errors.Is(err, hook.ErrNoExec) {
		return "use an http: hook here, or checkpoint through a runtime that runs exec hooks"
	}
	var he *hook.Error
	if errors.As(err, &he) && he.Spec.Kind == hook.KindExec {
		return "check the hook's command against its answer above, then checkpoint again"
	}
	return "check that the server serves the hook's endpoint (vLLM's sleep mode needs --enable-sleep-mode), then checkpoint again"
}
