package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/cryo-gpu/cryo/internal/interrupt"
	"github.com/cryo-gpu/cryo/internal/report"
)

// The exit status says what became of the workload, over an interrupt's
// 128+signal; a write to a stdout without a reader is no failure.
func TestExitStatusByFate(t *testing.T) {
	intr := interrupt.Cancelled(syscall.SIGINT)
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

// An interrupted step's report is printed whole, also where the step saw
// the context's bare error (context.Canceled) and not the signal: it says
// what was undone and checked, and the remedy.
func TestInterruptedReportWhole(t *testing.T) {
	intr := interrupt.Cancelled(syscall.SIGINT)
	step := &report.StepError{Op: "checkpoint", ID: "pid 7", Step: "suspend", Err: fmt.Errorf("pid 7: lock: %w", context.Canceled),
		Outcome: "CUDA untouched; checked: every process was returned to running (1 process, CUDA running)", Remedy: "none needed", Fate: report.FateIntact}
	for _, c := range []struct {
		err  error
		want string
	}{
		{step, "cryo: interrupted by SIGINT: checkpoint of pid 7 failed at step suspend: pid 7: lock: context canceled; CUDA untouched; checked: every process was returned to running (1 process, CUDA running); remedy: none needed\n"},
		{context.Canceled, "cryo: interrupted by SIGINT\n"},
	} {
		var b strings.Builder
		if code := reportError(intr, &b, c.err); code != 130 || b.String() != c.want {
			t.Errorf("exit %d, printed %q; want 130 and %q", code, b.String(), c.want)
		}
	}
}
