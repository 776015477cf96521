// Command cryo is one multi-call binary, to keep the bundle small: every
// program of cryo's on a node is this binary under another name, another
// argument or another environment. The Kubernetes front ends (agent,
// controller, kubectl-cryo) are cmd/cryo-k8s: they link client-go, which
// would slow every exec of this one. The table below lists them all, with who starts each
// and why it is chosen the way it is; the libraries decide nothing by
// themselves.
package main

import (
	"os"
	"path/filepath"

	"github.com/cryo-gpu/cryo/internal/cli"
	"github.com/cryo-gpu/cryo/internal/criuaction"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/installer"
	"github.com/cryo-gpu/cryo/internal/runcwrap"
	"github.com/cryo-gpu/cryo/internal/shim"
)

// A personality is one of the programs this binary is.
type personality struct {
	name   string      // what it is, for the reader
	chosen func() bool // whether this process is it
	run    func() int  // runs it; the process's exit code
	// duringInit: chosen in init, before main and while the main goroutine
	// is still locked to the process's main thread.
	duringInit bool
}

// personalities are tried in this order; the first chosen runs, and a
// process that is none of them is the CLI.
var personalities = []personality{
	// Started by cryo itself (internal/cuda, helperCommand): every driver
	// call runs in a short-lived child, this binary re-executed through
	// /proc/self/exe as "cryo-cuda-helper". It is chosen by the environment
	// (CRYO_CUDACR_HELPER=1), not argv[0], and before any other: it loads
	// libcuda and seizes a process's threads under ptrace, so it must be
	// nothing but the helper, whatever else its environment says. It runs
	// during init, as it did when package cuda chose it from its own init.
	{name: "driver helper", chosen: cuda.HelperRequested, run: cuda.RunHelper, duringInit: true},
	// Started by the CRIU action script at pre-dump (internal/criuaction,
	// startWatcher): a detached copy, argv[0] "cryo-resume-watch", that
	// resumes CUDA once CRIU has exited. Chosen by argv[0], which only that
	// re-execution gives; CRIU's own variables in its environment are
	// cleared, so it is no CRIU action.
	{name: "resume watcher", chosen: calledAs(criuaction.WatcherName), run: criuaction.RunWatcher},
	// Started by containerd, which derives containerd-shim-cryo-v2 from the
	// runtime type io.containerd.cryo.v2 and looks it up in PATH (`start`,
	// `delete`); `start` re-executes this binary under the same name as the
	// serving shim. Chosen by argv[0]: containerd passes only shim flags.
	{name: "containerd shim", chosen: calledAs(shim.BinaryName), run: runShim},
	// Started by Podman (or anything else that speaks runc's command line)
	// as its OCI runtime, cryo-runc. Chosen by argv[0]: the arguments are
	// runc's, and may be anything runc accepts.
	{name: "cryo-runc", chosen: calledAs("cryo-runc"), run: runRuncWrapper},
	// Started by CRIU at each step of a dump or restore, through the
	// action script that cryo-runc writes into the bundle, which execs
	// cryo-criu-action. Chosen by argv[0]: CRIU passes no arguments, and
	// its CRTOOLS_* variables are inherited by whatever an action starts,
	// a cryo command included, which must stay the CLI.
	// The restore's outcome check (internal/confine/outcome, Arm) execs
	// this binary as it is, from the script that the shim or cryo-runc
	// writes for one restore, with CRYO_OUTCOME_ONLY=1: chosen by that and
	// CRIU's CRTOOLS_SCRIPT_ACTION, which only CRIU running the script sets.
	{name: "CRIU action script", chosen: either(calledAs(criuaction.BinaryName), criuaction.OutcomeOnly), run: criuaction.Run},
	// Started by the Helm chart's DaemonSet (deploy/helm/cryo) in a
	// privileged pod with the host's root mounted, or by an administrator:
	// `cryo node install|uninstall`. Chosen by its first argument, since it
	// is a front end of its own (internal/installer) and not a command of
	// the CLI's tree.
	{name: "node installer", chosen: firstArg("node"), run: runInstaller},
}

// init chooses the personalities that must run before main; see
// personality.duringInit.
func init() {
	for _, p := range personalities {
		if p.duringInit && p.chosen() {
			os.Exit(p.run())
		}
	}
}

func main() {
	for _, p := range personalities {
		if p.chosen() {
			os.Exit(p.run())
		}
	}
	// The user's CLI, as cryo (or under any name not above).
	os.Exit(cli.Main(os.Args))
}

// calledAs chooses a personality by the base name of argv[0], which the
// installed links (make build, contrib/make-dist.sh) or a re-execution set.
func calledAs(name string) func() bool {
	return func() bool { return filepath.Base(os.Args[0]) == name }
}

// either chooses a personality by one of two tests.
func either(a, b func() bool) func() bool { return func() bool { return a() || b() } }

// firstArg chooses a personality by the first argument; the names that
// argv[0] chooses come first in the table, so only the CLI could clash,
// and it has no command of that name.
func firstArg(word string) func() bool {
	return func() bool { return len(os.Args) > 1 && os.Args[1] == word }
}

// runInstaller runs `cryo node …`.
func runInstaller() int { return installer.Main(os.Args[2:]) }

// runShim runs the shim, which exits by itself on failure.
func runShim() int {
	shim.Main()
	return 0
}

// runRuncWrapper runs cryo-runc on runc's arguments.
func runRuncWrapper() int { return runcwrap.Main(os.Args[1:]) }
