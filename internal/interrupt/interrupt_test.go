package interrupt

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// An interrupt is a cancellation to the layers below, and names its signal.
func TestCause(t *testing.T) {
	ctx := Cancelled(syscall.SIGTERM)
	if By(ctx) != syscall.SIGTERM || By(context.Background()) != 0 {
		t.Fatalf("By: %v, %v", By(ctx), By(context.Background()))
	}
	c := context.Cause(ctx)
	if !errors.Is(c, context.Canceled) || c.Error() != "interrupted by SIGTERM" {
		t.Fatalf("cause %q (a cancellation: %v)", c, errors.Is(c, context.Canceled))
	}
	if ExitCode(syscall.SIGINT) != 130 || Name(syscall.SIGKILL) != "killed" {
		t.Fatalf("exit %d, name %q", ExitCode(syscall.SIGINT), Name(syscall.SIGKILL))
	}
	if got := Completed(syscall.SIGHUP); got != "SIGHUP came once the command could no longer be undone: it completed" {
		t.Fatalf("Completed: %q", got)
	}
}

// A real signal to the process cancels the context with that signal, and
// tells onSignal once.
func TestContextCatchesSignal(t *testing.T) {
	told := make(chan syscall.Signal, 2)
	ctx, stop := Context(func(s syscall.Signal) { told <- s })
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the context was not cancelled by SIGHUP")
	}
	if By(ctx) != syscall.SIGHUP || <-told != syscall.SIGHUP {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}
