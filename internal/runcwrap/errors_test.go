package runcwrap

import (
	"fmt"
	"testing"

	"github.com/cryo-gpu/cryo/internal/report"
)

// cryo-runc's status: the workload's fate first (3, 4, as the CLI's),
// then runc's own status, then 1.
func TestExitCode(t *testing.T) {
	runc := fmt.Errorf("dump: %w", &exitError{code: 7})
	for _, c := range []struct {
		err  error
		want int
	}{
		{&report.StepError{Op: "checkpoint", Err: runc, Fate: report.FateLost}, 4},
		{&report.StepError{Op: "checkpoint", Err: runc, Fate: report.FateLostKept}, 3},
		{&report.StepError{Op: "checkpoint", Err: runc, Fate: report.FateIntact}, 7},
		{fmt.Errorf("query: %w", ErrContainer), 1},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
