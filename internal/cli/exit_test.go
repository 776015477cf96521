package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"

	"github.com/cryo-gpu/cryo/internal/report"
)

// The exit status says what became of the workload, over an interrupt's
// 128+signal; a write to a stdout without a reader is no failure.
func TestExitStatusByFate(t *testing.T) {
	intr, cancel := context.WithCancelCause(context.Background())
	cancel(&interrupted{sig: os.Interrupt})
	failed := func(f report.Fate) error {
		return &report.StepError{Op: "checkpoint", ID: "pid 7", Step: "dump", Err: errors.New("x"), Fate: f}
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want int
	}{
		{"intact", context.Background(), failed(report.FateIntact), ExitFailure},
		{"intact, interrupted", intr, failed(report.FateIntact), 130},
		{"lost, kept", intr, failed(report.FateLostKept), ExitLostKept},
		{"lost", context.Background(), failed(report.FateLost), ExitLost},
		{"wrapped", context.Background(), fmt.Errorf("a: %w", failed(report.FateLost)), ExitLost},
		{"closed stdout", context.Background(), &os.PathError{Op: "write", Path: os.Stdout.Name(), Err: syscall.EPIPE}, ExitOK},
		{"other EPIPE", context.Background(), &os.PathError{Op: "write", Path: "/run/x.sock", Err: syscall.EPIPE}, ExitFailure},
	} {
		if got := reportError(c.ctx, io.Discard, c.err); got != c.want {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.want)
		}
	}
}
