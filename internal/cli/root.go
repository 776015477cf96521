// Package cli is the user command `cryo`: a cobra command tree whose
// commands parse flags, call the libraries below it (the orchestration, the
// image and containerd packages, doctor, status), and print. No checkpoint
// logic lives here.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"text/template"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/interrupt"
	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/version"
)

// app is one run of the CLI, passed to every command builder so that no
// package variable holds a run's state (and a test builds a tree of its
// own): the configuration, read once from the environment when it starts
// (flags override single settings), where results go, the --format
// template, and the renderer of the long steps.
type app struct {
	cfg config.Config
	// stdout is where results go; progress and messages go to stderr, so
	// that `cryo restore … | read pid` and `--json | jq` see the result
	// alone.
	stdout io.Writer
	// tmpl is the --format template of this run, if one was given:
	// printJSON renders each result through it instead of printing JSON.
	tmpl *template.Template
	// bar draws the long steps of this run on stderr: one updating line
	// per step on a terminal (bytes, rate, ETA), plain lines elsewhere,
	// nothing with --quiet. One per run, so that the orchestration, the
	// driver calls and the image transfers share it; Main closes it
	// before the final message.
	bar *progress.Renderer
}

// newApp is a run with configuration c, printing its results on stdout.
func newApp(c config.Config) *app { return &app{cfg: c, stdout: os.Stdout} }

// The exit codes of every command, as Podman, ctr and the shells use them.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and failed
	ExitUsage   = 2 // bad flags or arguments: nothing was done
	// ExitNotPermitted is sysexits' EX_NOPERM: cryo lacks a privilege
	// (not root) or cannot read a path it was given; nothing was done.
	ExitNotPermitted = 77
	// ExitLostKept: a process of the workload died, and a complete
	// checkpoint holds it (the message says how to restore it).
	ExitLostKept = 3
	// ExitLost: a process of the workload died, and no complete
	// checkpoint holds it. Both win over an interrupt's status: a lost
	// workload must not read as a clean rollback.
	ExitLost = 4
	// An interrupt exits 128+signal (130 for SIGINT), after the command
	// rolled back what it had started and checked that it runs.
)

// Main runs the CLI with args (os.Args) and returns the exit code.
func Main(args []string) int {
	ap := newApp(config.FromEnv())
	ctx, stop := signalContext()
	defer stop()
	root := ap.newRoot()
	root.SetArgs(args[1:])
	err := root.ExecuteContext(ctx)
	ap.closeRenderer()
	return reportError(ctx, os.Stderr, withRetry(err, args))
}

// newRoot builds the command tree. Its help texts are also the source of
// docs/cli.md and the man pages (cryo gen-docs).
func (ap *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "cryo",
		Short: "checkpoint and restore processes and containers that use NVIDIA GPUs",
		Long: `cryo suspends CUDA in a process (its GPU memory moves into host memory),
checkpoints it with CRIU, and restores it later, here or on another host with
the same GPU model, without the application noticing.

For containers, use cryo through the tools you already have: containerd
(runtime io.containerd.cryo.v2), Podman (--runtime cryo, the name
containers.conf gives cryo-runc; or --runtime /usr/local/bin/cryo-runc) or
Kubernetes (RuntimeClass "cryo"). The commands here work on bare processes, on
checkpoint images (build, push, pull, inspect, restore) and on the host
(doctor).

Exit status: 0 success, 1 failure (the workload runs on, or waits for the
remedy the message gives), 2 bad usage (nothing was done), 3 a process of
the workload died and a complete checkpoint holds it, 4 a process of the
workload died and no checkpoint holds it, 77 not permitted (not root, an
unreadable path), 128+signal interrupted (130 for Ctrl-C: what was under
way was rolled back, and checked).`,
		Version:                    version.String(),
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
		SilenceErrors:              true,
		DisableAutoGenTag:          true,
		// Without a subcommand cobra would print help and exit 0; a script
		// that forgot the command should see a failure.
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf(cmd, "a command is required")
		},
	}
	root.SetVersionTemplate(version.Long() + "\n")
	// Flag help wrapped to the terminal: some flags need a sentence.
	cobra.AddTemplateFunc("wrapFlags", func(fs *pflag.FlagSet) string { return wrappedFlags(fs, helpWidth()) })
	tmpl := root.UsageTemplate()
	tmpl = strings.ReplaceAll(tmpl, ".LocalFlags.FlagUsages", "wrapFlags .LocalFlags")
	tmpl = strings.ReplaceAll(tmpl, ".InheritedFlags.FlagUsages", "wrapFlags .InheritedFlags")
	root.SetUsageTemplate(tmpl)
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(ap.helpCommand())
	root.AddGroup(
		&cobra.Group{ID: "ckpt", Title: "Checkpoint and restore:"},
		&cobra.Group{ID: "image", Title: "Checkpoint images:"},
		&cobra.Group{ID: "host", Title: "This host:"},
	)
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("ckpt", ap.checkpointCommand(), ap.restoreCommand(), ap.recoverCommand(), ap.cudaCommand())
	add("image", ap.imageCommand(), ap.inspectCommand())
	add("host", ap.doctorCommand(), ap.versionCommand())
	add("host", ap.psCommand())
	root.AddCommand(ap.genDocsCommand())
	root.AddCommand(topicCommands()...)
	root.SetHelpCommandGroupID("host")
	root.SetCompletionCommandGroupID("host")
	ap.registerCompletions(root)
	return root
}

// helpWidth is the terminal's width for help text, 100 off a terminal.
func helpWidth() int {
	if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil && w >= 40 {
		return min(w, 120)
	}
	return 100
}

// reportError prints err once, prefixed "cryo:", and returns the exit code.
func reportError(ctx context.Context, w io.Writer, err error) int {
	if closedStdout(err) {
		// `cryo inspect … | head -1`: the reader has what it wanted.
		// Whatever the command did is done (a checkpoint prints its
		// result last); a "broken pipe" line would only be noise.
		return ExitOK
	}
	code := reportMessage(ctx, w, err)
	switch report.FateOf(err) {
	case report.FateLostKept:
		return ExitLostKept
	case report.FateLost:
		return ExitLost
	}
	return code
}

// reportMessage prints err and returns its exit code, the workload's fate
// aside.
func reportMessage(ctx context.Context, w io.Writer, err error) int {
	// A signal that came when the work was done anyway changes nothing.
	if sig := interrupt.By(ctx); sig != 0 && err != nil {
		var named *interrupt.Error
		switch {
		case errors.As(err, &named):
			fmt.Fprintf(w, "cryo: %v\n", err) // the step and its rollback name the signal
		case errors.Is(err, context.Canceled) && !errors.As(err, new(*report.StepError)):
			// A bare cancellation says nothing more. A step's report
			// does (what was undone, what was checked, the remedy), even
			// where the step got the context's error, not its cause.
			fmt.Fprintf(w, "cryo: interrupted by %s\n", interrupt.Name(sig))
		default:
			fmt.Fprintf(w, "cryo: interrupted by %s: %v\n", interrupt.Name(sig), err)
		}
		return interrupt.ExitCode(sig)
	}
	if err == nil {
		if sig := interrupt.By(ctx); sig != 0 {
			// Past the point where it could be undone (a checkpoint's last
			// write, a restore whose CRIU is done), the command completed.
			fmt.Fprintf(w, "cryo: %s\n", interrupt.Completed(sig))
		}
		return ExitOK
	}
	if u, ok := asUsage(err); ok {
		fmt.Fprintf(w, "cryo: %v\nSee '%s --help'.\n", u.Err, u.Cmd)
		return ExitUsage
	}
	if notPermitted(err) {
		fmt.Fprintf(w, "cryo: %v\n", err)
		return ExitNotPermitted
	}
	if precheck.IsUsage(err) {
		// Refused before anything was touched, for how cryo was called (not
		// root, a terminal without --shell-job, a pid in a container): the
		// message carries its one remedy.
		fmt.Fprintf(w, "cryo: %v\n", err)
		return ExitUsage
	}
	if s, ok := asSilent(err); ok {
		return s.Code
	}
	fmt.Fprintf(w, "cryo: %v\n", err)
	return ExitFailure
}

// closedStdout: err is a write to cryo's stdout whose reader went away
// (SIGPIPE is ignored, see signalContext, so the write fails with EPIPE).
func closedStdout(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Path == os.Stdout.Name() && errors.Is(err, syscall.EPIPE)
}
