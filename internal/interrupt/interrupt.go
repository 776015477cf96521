// Package interrupt is what every front end means by a signal: a SIGINT,
// SIGTERM or SIGHUP to its process group (a terminal's Ctrl-C, a
// supervisor's stop, a closed terminal) cancels the command's context with
// the signal as its cause. The layers below see a cancellation and undo
// what is under way; the front end reads the signal back to word its
// outcome and to exit 128+signal, as shells do.
//
// cryo and cryo-runc are peers and may not import each other, so the one
// definition of an interrupt, its name and its sentences lives here.
package interrupt

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
)

// Signals are the ones a front end turns into a cancellation.
var Signals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// Error is the cause of a context cancelled by a signal.
type Error struct{ Sig syscall.Signal }

func (e *Error) Error() string { return "interrupted by " + Name(e.Sig) }

// Is makes an interrupt a cancellation for errors.Is, so that the layers
// below, which know nothing of signals, tell it from a failure (nothing is
// broken, the remedy is "none needed").
func (e *Error) Is(target error) bool { return target == context.Canceled }

// Context is cancelled on the first of Signals with an *Error as its cause,
// after onSignal (if set) has been told which. Later signals stay caught
// until stop, so that a second Ctrl-C cannot cut a rollback short.
func Context(onSignal func(syscall.Signal)) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, Signals...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			n, _ := s.(syscall.Signal)
			cancel(&Error{Sig: n})
			if onSignal != nil {
				onSignal(n)
			}
		case <-done:
		}
	}()
	return ctx, func() {
		close(done)
		signal.Stop(ch)
		cancel(nil)
	}
}

// Cancelled returns a context already cancelled by sig: what a test of a
// front end's wording and exit status starts from.
func Cancelled(sig syscall.Signal) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&Error{Sig: sig})
	return ctx
}

// By is the signal that cancelled ctx, or 0.
func By(ctx context.Context) syscall.Signal {
	var e *Error
	if errors.As(context.Cause(ctx), &e) {
		return e.Sig
	}
	return 0
}

// Name is the signal's conventional name ("SIGINT"), as users type it.
func Name(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

// Completed is the sentence for a signal that came once the command could
// no longer be undone (a checkpoint's last write, a restore whose CRIU is
// done, a resume): the command completed, and its caller must not read
// the signal as a rollback.
func Completed(s syscall.Signal) string {
	return Name(s) + " came once the command could no longer be undone: it completed"
}

// ExitCode is the shells' status for a command ended by s: 128+signal.
func ExitCode(s syscall.Signal) int { return 128 + int(s) }
