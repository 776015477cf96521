package runcwrap

import (
	"context"
	"strings"

	"github.com/cryo-gpu/cryo/internal/bundle"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// pauseCmd wraps `runc pause ID` in the GPU-free pause: CUDA is suspended
// (its GPU memory freed) before the real runc freezes the container. Help,
// usage errors, a container that does not run, and a freeze-only pause
// (annotation or configuration) are runc's alone.
func (w *wrapper) pauseCmd(ctx context.Context) int {
	id := pauseID(w.cmd.rest)
	if id == "" {
		return w.exec()
	}
	st, err := w.cli.runc().State(ctx, id)
	o := w.orchestrator()
	if err != nil || st.Status != "running" || !o.GPUFreePause(bundle.Annotations(st.Bundle)) {
		return w.exec()
	}
	t, err := w.cli.target(ctx, id)
	if err != nil {
		return w.exec()
	}
	if err := o.Pause(ctx, t, w.runcStep); err != nil {
		w.log.error("%v", err)
		return exitCode(ctx, err)
	}
	return 0
}

// resumeCmd wraps `runc resume ID`: the real runc thaws, then CUDA is resumed
// in the processes a GPU-free pause suspended.
func (w *wrapper) resumeCmd(ctx context.Context) int {
	id := pauseID(w.cmd.rest)
	if id == "" {
		return w.exec()
	}
	t := orchestrate.Target{ID: id, PIDs: func(ctx context.Context) ([]int, error) { return w.cli.pids(ctx, id) }}
	if err := w.orchestrator().Resume(ctx, t, w.runcStep); err != nil {
		w.log.error("%v", err)
		return exitCode(ctx, err)
	}
	return 0
}

// deleteCmd wraps `runc delete [--force] ID` of a container that a
// GPU-free pause left a record for: the record goes once runc has deleted
// the container, so that a later container of the same name does not
// inherit it. It stays when runc refuses, since the paused processes then
// still need it to resume. Every other delete is runc's alone.
func (w *wrapper) deleteCmd() int {
	id := deleteID(w.cmd.rest)
	o := w.orchestrator()
	if id == "" || !o.HasPause(id) {
		return w.exec()
	}
	code, err := w.runRunc()
	if err != nil {
		w.log.error("%v", err)
		return 1
	}
	if code == 0 {
		o.ForgetPause(id)
	}
	return code
}

// deleteID is the container of `delete [-f|--force] ID`, "" for any
// other form (help, several ids), which runc handles alone.
func deleteID(rest []string) string {
	var args []string
	for _, a := range rest {
		if a != "-f" && a != "--force" && a != "-force" {
			args = append(args, a)
		}
	}
	return pauseID(args)
}

// runcStep runs the real runc with the caller's exact command line, as one
// step of the orchestration.
func (w *wrapper) runcStep(context.Context) error {
	code, err := w.runRunc()
	if err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code}
	}
	return nil
}

// pauseID is the container id of `runc pause|resume [-h] ID`; "" for help
// or a usage error, which runc answers itself.
func pauseID(rest []string) string {
	var args []string
	for _, a := range rest {
		if strings.HasPrefix(a, "-") {
			return ""
		}
		args = append(args, a)
	}
	if len(args) != 1 {
		return ""
	}
	return args[0]
}
