package runcwrap

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	gorunc "github.com/containerd/go-runc"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/leftovers"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// restore checks the checkpoint before runc sees it, runs `runc restore`,
// and resumes CUDA in the restored processes.
func (w *wrapper) restore(ctx context.Context) int {
	o := parseCROpts(w.cmd.rest)
	if o.help || o.id == "" {
		return w.exec()
	}
	// One lock from the check to the CUDA resume: a checkpoint of the
	// container must not start while its processes are still suspended.
	l, err := w.orchestrator().LockTarget("restore", o.id)
	if err != nil {
		w.log.error("%v", &report.StepError{Op: "restore", ID: o.id, Step: orchestrate.StepLock, Err: err,
			Outcome: "nothing was restored", Remedy: "wait for that run to finish, then retry"})
		return exitCode(ctx, err)
	}
	defer l.Release()
	// The GPUs the container gets are those of its new spec (a device
	// plugin or CDI may give it other GPUs than the checkpoint ran on).
	// Without a readable spec runc's restore fails on its own; check the
	// checkpoint against all of the host's GPUs meanwhile.
	scope, err := orchestrate.ScopeFromBundle(o.bundle)
	if err != nil {
		w.log.warn("restore of container %s: %v; checking the checkpoint against all of this host's GPUs", o.id, err)
	}
	m, err := w.orchestrator().CheckRestore(ctx, o.id, o.imagePath, scope)
	if err != nil {
		// A *report.StepError: it says nothing was restored, and why.
		w.log.error("%v", err)
		return exitCode(ctx, err)
	}
	w.restoreTCP(o)
	undo := w.confineCgroups(o)
	armed := w.armOutcome(o)
	if armed == nil {
		undo()
		return 1
	}
	defer w.disarm(o, armed)
	if o.detach {
		defer undo()
		return w.completed(ctx, w.restoreDetached(ctx, o, m, scope, l))
	}
	return w.restoreForeground(ctx, o, m, scope, l, undo)
}

// confineCgroups keeps the restored tasks in the cgroups runc makes for
// the new container (criu.ConfineCgroups), for this restore only: the
// returned function takes the line out of the bundle's CRIU configuration
// again, so that later checkpoints of the container run as before.
func (w *wrapper) confineCgroups(o crOpts) func() {
	undo, _, err := criu.ConfineCgroups(o.bundle)
	if err != nil {
		w.log.warn("restore of container %s: %v; CRIU moves the restored tasks into the checkpoint's cgroup paths, rewritten into the container's cgroup (the check refused any other)", o.id, err)
	}
	return func() {
		if err := undo(); err != nil {
			w.log.warn("restore of container %s: %s stays in the bundle's CRIU configuration: %v", o.id, criu.ManageCgroupsIgnore, err)
		}
	}
}

// restoreTCP adds --tcp-established to runc's command line when the
// checkpoint holds established TCP connections: CRIU restores them only
// with it, and a caller that did not pass it (Podman without
// --tcp-established) would otherwise get a failed restore. The flag goes
// first: runc reads flags only before the container id.
func (w *wrapper) restoreTCP(o crOpts) {
	if o.tcp {
		return
	}
	if n, _ := criu.EstablishedTCP(o.imagePath); n > 0 {
		w.log.info("restore of container %s: the checkpoint holds %d established TCP connection(s): restoring with --tcp-established", o.id, n)
		w.cmd.rest = append([]string{"--tcp-established"}, w.cmd.rest...)
	}
}

// restoreDetached is Podman's case (conmon runs `restore --detach`): runc
// returns once the processes run, then CUDA is resumed.
func (w *wrapper) restoreDetached(ctx context.Context, o crOpts, m *manifest.Manifest, scope orchestrate.GPUScope, l *lock.Lock) int {
	cleanup := w.failedRestoreCleanup(o, scope)
	removed := restoreRemoved
	if cleanup == nil {
		removed = ""
	}
	_, post, err := w.hooksOf(o.id, o.bundle, "restore")
	if err != nil {
		w.log.error("%v", err)
		return exitCode(ctx, err)
	}
	_, err = w.orchestrator().Restore(ctx, o.id, m, orchestrate.Restorer{
		Restore: func(ctx context.Context) (int, error) {
			code, err := w.runRuncUntil(ctx, config.EnvOrchestrated+"=1")
			if err != nil {
				return 0, err
			}
			if code != 0 {
				return 0, outcomeErr(o, &orchestrate.CRIUError{Op: "restore (runc restore)", LogPath: filepath.Join(workDir(o), "restore.log"), Err: &exitError{code}, Images: o.imagePath})
			}
			outcomeStep(o, m)
			return w.cli.initPID(ctx, o.id), nil
		},
		Target: func(int) orchestrate.Target { return w.restoredTarget(ctx, o, scope, l) },
		// Podman sees the container exit and reports it; left running with
		// CUDA suspended, it would hang unseen.
		Kill: func(ctx context.Context) {
			_ = w.cli.runc().Kill(ctx, o.id, int(syscall.SIGKILL), &gorunc.KillOpts{All: true})
		},
		Remedy:      outcomeRemedy,
		Cleanup:     cleanup,
		Removed:     removed,
		PostRestore: post,
	})
	if orchestrate.PostHookFailed(err) {
		// The container runs with its GPU state; a failed restore would
		// have Podman remove it. The error is logged.
		w.log.error("%v", err)
		err = nil
	}
	if err != nil {
		w.log.error("%v", err)
		return exitCode(ctx, err) // runc's own status when runc failed
	}
	w.log.info("restore of container %s: %s", o.id, manifest.StepsText(m.RestoreSteps))
	return 0
}

// restoreForeground: runc restore without --detach waits for the container
// to exit, so CUDA is resumed while it runs, once runc reports "running".
// The lock is released once CUDA runs: runc stays until the container
// exits, and the container may be checkpointed meanwhile. A runc that does
// not report "running" within the restore's deadline is killed; whatever
// a restore that never ran left is removed.
func (w *wrapper) restoreForeground(ctx context.Context, o crOpts, m *manifest.Manifest, scope orchestrate.GPUScope, l *lock.Lock, undo func()) int {
	defer undo() // on an early return; it acts once
	if err := w.cfg.RestoreTimeoutErr; err != nil {
		w.log.error("%v", &report.StepError{Op: "restore", ID: o.id, Step: orchestrate.StepRestore, Err: err,
			Outcome: "nothing was restored", Remedy: "unset " + config.EnvRestoreTimeout + " or give it a positive duration such as 15m"})
		return 1
	}
	cleanup := w.failedRestoreCleanup(o, scope)
	cmd := w.runcCmd(config.EnvOrchestrated + "=1")
	if err := cmd.Start(); err != nil {
		w.log.error("restore of container %s: start runc: %v", o.id, err)
		return 1
	}
	exited := make(chan struct{})
	resumed := make(chan struct{})
	var ran, late bool
	go func() {
		defer close(resumed)
		defer l.Release()
		ran, late = w.waitRunning(ctx, o.id, exited)
		undo() // CRIU has read its configuration: the container may be checkpointed from now on
		if ran {
			outcomeStep(o, m)
			if err := w.resume(ctx, o, m, scope, l); err != nil {
				w.log.error("%v", err)
			} else {
				w.log.info("restore of container %s: %s", o.id, manifest.StepsText(m.RestoreSteps))
			}
		} else if late {
			_ = cmd.Process.Kill()
		}
	}()
	code := waitExit(cmd)
	close(exited)
	<-resumed
	if !ran {
		w.endForeground(ctx, o, cleanup, late)
	}
	return code
}

// endForeground removes what a foreground restore that never ran left
// (nothing, where runc cleaned up after a failure itself), and reports one
// that was cut off at the deadline; runc reported any other failure.
func (w *wrapper) endForeground(ctx context.Context, o crOpts, cleanup func(context.Context) error, late bool) {
	outcome := "nothing was restored"
	if cleanup != nil {
		if err := cleanup(context.WithoutCancel(ctx)); err != nil {
			outcome += "; " + err.Error()
		} else {
			outcome += "; " + restoreRemoved
		}
	}
	switch {
	case late:
		w.log.error("%v", &report.StepError{Op: "restore", ID: o.id, Step: orchestrate.StepRestore,
			Err: orchestrate.RestoreDeadlineExceeded(w.cfg.RestoreTimeout, nil), Outcome: outcome, Remedy: orchestrate.RestoreDeadlineRemedy})
	case w.logRefusal(o, outcome): // the check of the restored tasks killed them
	case strings.Contains(outcome, leftovers.ErrLeft.Error()):
		w.log.error("restore of container %s failed; %s", o.id, outcome)
	}
}

// waitRunning polls runc until the container runs (ran), or until the
// restore's deadline passes (late); neither if runc exited first.
func (w *wrapper) waitRunning(ctx context.Context, id string, exited <-chan struct{}) (ran, late bool) {
	deadline := time.After(w.cfg.RestoreTimeout)
	for {
		if st, err := w.cli.status(ctx, id); err == nil && st == "running" {
			return true, false
		}
		select {
		case <-ctx.Done():
			return false, false
		case <-exited:
			return false, false
		case <-deadline:
			return false, true
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// resume resumes CUDA in the restored container's processes, under l.
func (w *wrapper) resume(ctx context.Context, o crOpts, m *manifest.Manifest, scope orchestrate.GPUScope, l *lock.Lock) error {
	return w.orchestrator().ResumeRestored(ctx, w.restoredTarget(ctx, o, scope, l), m)
}

// restoredTarget describes the restored container to the orchestration,
// under the lock l that this restore holds from its check on.
func (w *wrapper) restoredTarget(ctx context.Context, o crOpts, scope orchestrate.GPUScope, l *lock.Lock) orchestrate.Target {
	return orchestrate.Target{
		ID:      o.id,
		PIDs:    func(ctx context.Context) ([]int, error) { return w.cli.pids(ctx, o.id) },
		Scope:   scope,
		InitPID: w.cli.initPID(ctx, o.id),
		Lock:    l,
	}
}
