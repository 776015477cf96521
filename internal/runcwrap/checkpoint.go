package runcwrap

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// checkpoint wraps `runc checkpoint` in cryo's orchestration. The dump step
// is the real runc with the caller's exact command line; the manifest lands
// in the --image-path directory, which is the directory Podman exports.
func (w *wrapper) checkpoint(ctx context.Context) int {
	o := parseCROpts(w.cmd.rest)
	if o.help || o.id == "" || o.preDump {
		// Help, usage errors and pre-dumps (memory pre-copy, the process keeps
		// running and keeps its GPU state) are runc's alone.
		return w.exec()
	}
	if err := w.doCheckpoint(ctx, o); err != nil {
		w.log.error("%v", err)
		return exitCode(ctx, err)
	}
	return 0
}

func (w *wrapper) doCheckpoint(ctx context.Context, o crOpts) error {
	// runc creates the directory itself, but the manifest is written before
	// runc runs.
	if err := os.MkdirAll(o.imagePath, 0o700); err != nil {
		return fmt.Errorf("checkpoint of container %s: create image directory: %w", o.id, err)
	}
	t, err := w.cli.target(ctx, o.id)
	if err != nil {
		return fmt.Errorf("checkpoint of container %s: %w: %v (is it running under this --root?)", o.id, ErrContainer, err)
	}
	if wd := workDir(o); wd != o.imagePath {
		t.CRIUWorkDir = wd // CRIU's log and stats-dump land there, not in the image
	}
	if st, err := w.cli.runc().State(ctx, o.id); err == nil {
		if t.PreCheckpoint, t.Wake, err = w.hooksOf(o.id, st.Bundle, "checkpoint"); err != nil {
			return err
		}
	}
	dump := func(ctx context.Context) error { return w.runDump(o) }
	m, err := w.orchestrator().Checkpoint(ctx, t, o.imagePath, o.leaveRunning, dump)
	if t.Thaw != nil {
		w.repause(ctx, o.id)
	}
	if err != nil {
		return err // a *report.StepError: container, step, outcome, remedy
	}
	w.log.info("checkpoint of container %s: %d CUDA process(es) in %s", o.id, len(m.Processes), o.imagePath)
	if pids := orchestrate.StillSuspended(m); len(pids) > 0 && o.leaveRunning {
		w.log.warn("checkpoint of container %s: CUDA in pid(s) %v was suspended before this checkpoint and is still suspended: run `cryo cuda resume` on them", o.id, pids)
	}
	return nil
}

// runDump runs the real `runc checkpoint`. config.EnvOrchestrated tells the
// CRIU action script, if the container has one, that cryo-runc is already
// doing its job.
func (w *wrapper) runDump(o crOpts) error {
	code, err := w.runRuncToEnd(config.EnvOrchestrated + "=1")
	if err != nil {
		return err
	}
	if code != 0 {
		return &orchestrate.CRIUError{Op: "dump (runc checkpoint)", LogPath: filepath.Join(workDir(o), "dump.log"), Err: &exitError{code}}
	}
	return nil
}

// workDir is where CRIU writes its logs: --work-path, else the image path.
func workDir(o crOpts) string {
	if o.workPath != "" {
		return o.workPath
	}
	return o.imagePath
}

// repause freezes again a container that was paused before its checkpoint
// and still runs (--leave-running, or a failed checkpoint): the checkpoint
// thawed it for the driver, and its CUDA processes may still be suspended
// by a GPU-free pause, which `runc resume` brings back.
func (w *wrapper) repause(ctx context.Context, id string) {
	if st, err := w.cli.status(ctx, id); err != nil || st != "running" {
		return
	}
	if err := w.cli.runc().Pause(ctx, id); err != nil {
		// Logged, not returned: the checkpoint's own result is what runc's caller reads.
		w.log.warn("%s", report.Render(fmt.Sprintf("checkpoint of container %s: could not pause it again: %v", id, err), "run `runc pause "+id+"`"))
	}
}
