package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/report"
)

// sigint stands for a front end's interrupt: a cancellation with a cause.
type sigint struct{}

func (sigint) Error() string        { return "interrupted by SIGINT" }
func (sigint) Is(target error) bool { return target == context.Canceled }

// An interrupted step says once what was stopped, once what the undo did,
// once what the check found, and one remedy: a suspend interrupted during
// the driver's copy, which the driver's set rolled back itself, and a
// step stopped between steps with nothing to undo.
func TestInterruptedOutcomeSaidOnce(t *testing.T) {
	copying := fmt.Errorf("suspend: %w; %w", fmt.Errorf("stopped once the checkpoint had ended: %w", sigint{}), cuda.ErrRolledBack)
	between := fmt.Errorf("stopped before this step: %w", sigint{})
	for _, c := range []struct {
		name string
		step StepName
		err  error
		want string
	}{
		{"mid-copy", StepSuspend, copying, "checkpoint of pid 42 failed at step suspend: stopped once the checkpoint had ended: interrupted by SIGINT; " +
			"the suspend's own rollback resumed CUDA; checked: every process was returned to running (1 process, CUDA running); " +
			"remedy: none needed; take the checkpoint again when you are ready"},
		{"between steps", StepInventory, between, "checkpoint of pid 42 failed at step inventory: stopped before this step: interrupted by SIGINT; " +
			"CUDA untouched; checked: every process was returned to running (1 process, CUDA running); " +
			"remedy: none needed; take the checkpoint again when you are ready"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tgt := Target{ID: "pid 42", PIDs: func(context.Context) ([]int, error) { return []int{os.Getpid()}, nil }}
			cp := newCheckpoint(New(testConfig).env(), tgt, t.TempDir(), false, nil)
			err := cp.runner(nil).fail(context.Background(), c.step, c.err)
			if got := err.Error(); got != c.want {
				t.Errorf("message\n got: %s\nwant: %s", got, c.want)
			}
			for _, once := range []string{"returned to running", "left running", "remedy:", "SIGINT"} {
				if n := strings.Count(err.Error(), once); n > 1 {
					t.Errorf("%q said %d times: %s", once, n, err)
				}
			}
			if report.FateOf(err) != report.FateIntact || !errors.Is(err, context.Canceled) {
				t.Errorf("fate %d, a cancellation %v: want intact and one", report.FateOf(err), errors.Is(err, context.Canceled))
			}
			if c.step == StepSuspend && !errors.Is(err, cuda.ErrRolledBack) {
				t.Error("the rolled-back suspend's error no longer is cuda.ErrRolledBack")
			}
		})
	}
}

// undoneOnly keeps what an undo did and drops its claim that the target
// runs; an outcome without that claim stays whole.
func TestUndoneOnly(t *testing.T) {
	for in, want := range map[string]string{
		untouchedOutcome: "CUDA untouched",
		"the processes were left running with CUDA resumed": "CUDA resumed",
		"the processes were left running":                   "",
		driverRolledBack:                                    "the suspend's own rollback resumed CUDA",
		pauseUntouched:                                      "CUDA untouched",
		"the processes were dumped and have exited":         "the processes were dumped and have exited",
	} {
		if got := undoneOnly(in); got != want {
			t.Errorf("undoneOnly(%q) = %q, want %q", in, got, want)
		}
	}
}
