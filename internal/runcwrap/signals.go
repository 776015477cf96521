package runcwrap

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
)

// interrupted is the cause of cryo-runc's context when a signal to its
// process group (a terminal's Ctrl-C on `podman container checkpoint`,
// Podman's SIGTERM to its runtime, a closed terminal's SIGHUP) cancelled
// it. It carries the signal, so that cryo-runc exits 128+signal as the
// shells and the cryo CLI do.
type interrupted struct{ sig syscall.Signal }

func (i *interrupted) Error() string { return "interrupted by " + sigName(i.sig) }

// Is makes an interrupt a cancellation for the orchestration, which tells
// it from a failure (nothing is broken, the remedy is "none needed").
func (i *interrupted) Is(target error) bool { return target == context.Canceled }

// signalContext is cancelled on SIGINT, SIGTERM and SIGHUP with the
// signal as its cause. Later signals stay caught until stop, so that a
// second Ctrl-C cannot cut a rollback short.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			n, _ := s.(syscall.Signal)
			cancel(&interrupted{sig: n})
		case <-done:
		}
	}()
	return ctx, func() {
		close(done)
		signal.Stop(ch)
		cancel(nil)
	}
}

// interruptedBy is the signal that cancelled ctx, or 0.
func interruptedBy(ctx context.Context) syscall.Signal {
	var i *interrupted
	if errors.As(context.Cause(ctx), &i) {
		return i.sig
	}
	return 0
}

func sigName(s syscall.Signal) string {
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

// completed passes code on, and says so when a signal came but the
// command succeeded all the same: past the point where it could be undone
// (a checkpoint's last write, a restore whose CRIU is done, a resume), a
// command completes, and its caller must not read the signal as a
// rollback.
func (w *wrapper) completed(ctx context.Context, code int) int {
	if sig := interruptedBy(ctx); sig != 0 && code == 0 {
		w.log.warn("%s came once the command could no longer be undone: it completed", sigName(sig))
	}
	return code
}
