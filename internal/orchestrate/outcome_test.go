package orchestrate

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/report"
)

// A failed checkpoint's outcome is checked on the processes: one that runs
// is said returned to running; a root that died is named, with its fate;
// a child that exited (not the root, no CUDA) loses nothing.
func TestCheckedOutcome(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pids []int
		want string
		fate report.Fate
	}{
		{"runs", []int{os.Getpid()}, "checked: every process was returned to running (1 process, CUDA running)", report.FateIntact},
		{"died", []int{dead.Process.Pid, os.Getpid()}, "died", report.FateLost},
		{"a child exited", []int{os.Getpid(), dead.Process.Pid}, "returned to running (1 process, CUDA running); process [" + strconv.Itoa(dead.Process.Pid) + "] has exited on its own", report.FateIntact},
	} {
		t.Run(c.name, func(t *testing.T) {
			pids := c.pids
			tgt := Target{ID: "pid 42", PIDs: func(context.Context) ([]int, error) { return pids, nil }}
			cp := newCheckpoint(New(testConfig).env(), tgt, t.TempDir(), false, nil)
			err := cp.runner(nil).fail(context.Background(), StepDump, errors.New("boom"))
			if !strings.Contains(err.Error(), c.want) || report.FateOf(err) != c.fate {
				t.Errorf("fate %d, message %q; want fate %d and %q", report.FateOf(err), err, c.fate, c.want)
			}
		})
	}
}

// A checkpoint without a cryo manifest (CRIU's own dump) holds no process
// suspended on purpose: the check after its restore must not need one.
func TestFoundSuspendedWithoutManifest(t *testing.T) {
	if held := foundSuspended(nil); len(held) != 0 {
		t.Fatalf("held %v without a manifest", held)
	}
}
