// Package runcwrap is cryo-runc, a runc-compatible OCI runtime for Podman,
// CRI-O, or anything else that calls an OCI runtime binary. It hands every
// command to the real runc untouched (by exec, so stdio, descriptors and exit
// status are runc's own) except these:
//
//   - checkpoint runs cryo's checkpoint orchestration around `runc checkpoint`:
//     CUDA is suspended before CRIU dumps the container, the GPU manifest is
//     written into the image directory, and CUDA is resumed afterwards
//     (--leave-running) or on any failure;
//   - restore checks the manifest (digests, GPUs) before `runc restore` is
//     called at all, and resumes CUDA in the restored processes after it;
//   - pause and resume are GPU-free: CUDA is suspended before the freeze and
//     resumed after the thaw (orchestrate.Pause), unless turned off.
//
// With CRYO_CRIU_HOOKS=1 it also prepares containers at create/run so that a
// direct `runc checkpoint`, bypassing cryo-runc, is CUDA-safe (see internal/criuaction/hooks).
package runcwrap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/version"
)

// wrapper is one cryo-runc invocation.
type wrapper struct {
	cmd  cmdline
	cfg  config.Config
	runc string // the real runc
	log  *logger
	cli  runcCLI
}

// Main runs cryo-runc with the arguments after argv[0] and returns the exit code.
func Main(args []string) int {
	c := parseCmdline(args)
	log := newLogger(c)
	cfg, err := config.Load(c.envFile)
	if err != nil {
		log.error("%v", err)
		return 1
	}
	runc, err := realRunc(cfg)
	if err != nil {
		log.error("%v", err)
		return 1
	}
	w := &wrapper{cmd: c, cfg: cfg, runc: runc, log: log, cli: runcCLI{path: runc, globals: c.globals}}
	ctx, stop := signalContext()
	defer stop()
	// A caller that goes away (Podman interrupted, its pipes closed) must
	// not kill cryo-runc with SIGPIPE at its next log line, in the middle
	// of a checkpoint or its rollback: the write fails and is dropped.
	// Caught, not ignored, so that an exec'd runc gets the default back.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	switch route(c, args) {
	case routeVersion:
		return w.version()
	case routeCheckpoint:
		return w.completed(ctx, w.checkpoint(ctx))
	case routeRestore:
		w.prepare()
		return w.restore(ctx)
	case routePause:
		return w.completed(ctx, w.pauseCmd(ctx))
	case routeResume:
		return w.completed(ctx, w.resumeCmd(ctx))
	case routeDelete:
		return w.deleteCmd()
	case routeCreate:
		w.prepare()
	}
	return w.exec()
}

// A path is what cryo-runc does with one command line.
type path int

const (
	routeExec       path = iota // handed to runc as it came (exec)
	routeVersion                // runc's version, then cryo's
	routeCheckpoint             // cryo's checkpoint around runc checkpoint
	routeRestore                // the manifest checked, then runc restore, then CUDA resumed
	routePause                  // CUDA suspended, then runc pause
	routeResume                 // runc resume, then CUDA resumed
	routeDelete                 // runc delete, then cryo's leftovers of the container
	routeCreate                 // the bundle prepared (CRYO_CRIU_HOOKS), then exec
)

// route chooses the path by the command word alone: runc's own flags
// after it (even -v, --version or --help) are runc's to read.
func route(c cmdline, args []string) path {
	if c.command == "" && wantsVersion(args) {
		return routeVersion
	}
	switch c.command {
	case "checkpoint":
		return routeCheckpoint
	case "restore":
		return routeRestore
	case "pause":
		return routePause
	case "resume":
		return routeResume
	case "delete":
		return routeDelete
	case "create", "run":
		return routeCreate
	}
	return routeExec
}

// exec hands the command to the real runc; it returns only on failure.
func (w *wrapper) exec() int {
	err := w.execRunc()
	w.log.error("%v", err)
	return 1
}

// orchestrator is cryo's one checkpoint/restore sequence, configured as
// cryo-runc was, logging where cryo-runc logs. The driver loads its library
// in helper processes, never in cryo-runc.
func (w *wrapper) orchestrator() *orchestrate.Orchestrator {
	return orchestrate.New(
		orchestrate.WithConfig(w.cfg),
		orchestrate.WithLogger(w.log.slog()),
		orchestrate.WithFrontEnd(remedies),
	)
}

// wantsVersion is runc's `--version`/`-v` (no command).
func wantsVersion(args []string) bool {
	for _, a := range args {
		if a == "--version" || a == "-v" {
			return true
		}
	}
	return false
}

// version prints runc's version lines, as Podman expects them first, and
// then the cryo that wraps it: `podman info` shows both.
func (w *wrapper) version() int {
	c := exec.Command(w.runc, "--version")
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	err := c.Run()
	fmt.Printf("cryo-runc: cryo %s\n", version.String())
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode() // runc's status, as for every passed-through call
	}
	if err != nil {
		w.log.error("%s --version: %v", w.runc, err)
		return 1
	}
	return 0
}
