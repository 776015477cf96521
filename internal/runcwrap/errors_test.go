package runcwrap

import (
	"context"
	"fmt"
	"syscall"
	"testing"

	"github.com/cryo-gpu/cryo/internal/interrupt"
	"github.com/cryo-gpu/cryo/internal/report"
)

// cryo-runc's status: the workload's fate first (3, 4, as the CLI's),
// then 128+signal for an interrupt that left the workload intact, then
// runc's own status, then 1.
func TestExitCode(t *testing.T) {
	runc := fmt.Errorf("dump: %w", &exitError{code: 7})
	calm := context.Background()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want int
	}{
		{calm, &report.StepError{Op: "checkpoint", Err: runc, Fate: report.FateLost}, 4},
		{calm, &report.StepError{Op: "checkpoint", Err: runc, Fate: report.FateLostKept}, 3},
		{calm, &report.StepError{Op: "checkpoint", Err: runc, Fate: report.FateIntact}, 7},
		{calm, fmt.Errorf("query: %w", ErrContainer), 1},
		{interruptedCtx(syscall.SIGINT), &report.StepError{Op: "checkpoint", Err: context.Canceled, Fate: report.FateIntact}, 130},
		{interruptedCtx(syscall.SIGTERM), &report.StepError{Op: "pause", Err: context.Canceled}, 143},
		{interruptedCtx(syscall.SIGHUP), &report.StepError{Op: "checkpoint", Err: runc, Fate: report.FateIntact}, 129},
		{interruptedCtx(syscall.SIGINT), &report.StepError{Op: "checkpoint", Err: runc, Fate: report.FateLost}, 4},
		{interruptedCtx(syscall.SIGTERM), &report.StepError{Op: "checkpoint", Err: runc, Fate: report.FateLostKept}, 3},
	} {
		if got := exitCode(c.ctx, c.err); got != c.want {
			t.Errorf("exitCode(%v, %v) = %d, want %d", context.Cause(c.ctx), c.err, got, c.want)
		}
	}
}

func interruptedCtx(sig syscall.Signal) context.Context { return interrupt.Cancelled(sig) }
