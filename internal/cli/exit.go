package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/interrupt"
	"github.com/cryo-gpu/cryo/internal/report"
)

// UsageError is bad input caught before anything was done: unknown flags or
// commands, missing or extra arguments, flags that contradict each other.
// It exits 2 and points at the command's help instead of printing it all.
type UsageError struct {
	Cmd string // the command path, for "See 'cryo image build --help'"
	Err error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(cmd *cobra.Command, format string, a ...any) error {
	return &UsageError{Cmd: cmd.CommandPath(), Err: fmt.Errorf(format, a...)}
}

// usageRemedy is a usage error whose remedy travels as a value.
func usageRemedy(cmd *cobra.Command, err error, remedy string) error {
	return &UsageError{Cmd: cmd.CommandPath(), Err: report.WithRemedy(err, remedy)}
}

func asUsage(err error) (*UsageError, bool) {
	var u *UsageError
	return u, errors.As(err, &u)
}

// silentError is a failure the command has already reported in full (doctor's
// table, a per-pid state line): only the exit code remains.
type silentError struct{ Code int }

func (e *silentError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

func asSilent(err error) (*silentError, bool) {
	var s *silentError
	return s, errors.As(err, &s)
}

// signalContext is cancelled on SIGINT, SIGTERM and SIGHUP, with the signal as
// its cause (internal/interrupt). Commands pass it down, so that an
// interrupted suspend or dump still rolls back instead of leaving processes
// locked; later signals are caught too, so that a second Ctrl-C cannot cut
// the rollback short.
func signalContext() (context.Context, func()) {
	// A reader of cryo's output that goes away (`cryo checkpoint … | head`)
	// must not kill cryo in the middle of a checkpoint, with CUDA locked
	// and the threads held: a write to the closed pipe fails (EPIPE), is
	// dropped, and the operation finishes or rolls back as it would.
	// Caught, not ignored: an ignored signal stays ignored across exec,
	// and CRIU, the driver helper and podman would inherit that.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return interrupt.Context(func(s syscall.Signal) {
		fmt.Fprintf(os.Stderr, "cryo: %s received: stopping and rolling back what is under way\n", interrupt.Name(s))
	})
}

// noArgs refuses arguments; on the root it names the unknown command and the
// nearest real ones.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if !cmd.HasParent() || cmd.HasSubCommands() {
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return usageErrorf(cmd, "%s", msg)
	}
	return usageErrorf(cmd, "takes no arguments, got %q", args)
}

// exactArgs wants n arguments, named in the command's Use line.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf(cmd, "wants %s, got %d: usage: %s", plural(n, "argument", "arguments"), len(args), cmd.UseLine())
		}
		return nil
	}
}

// minArgs wants at least n arguments.
func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf(cmd, "wants at least %s: usage: %s", plural(n, "argument", "arguments"), cmd.UseLine())
		}
		return nil
	}
}
