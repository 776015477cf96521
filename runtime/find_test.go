package runtime

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/cryo-gpu/cryo/cudacr"
)

// A process that exits between the listing and the scan is no failure:
// the list is taken again.
func TestFindCUDARetriesVanishedProcess(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	calls := 0
	target := Target{ID: "c", PIDs: func(context.Context) ([]int, error) {
		calls++
		if calls == 1 {
			return []int{os.Getpid(), dead.Process.Pid}, nil
		}
		return []int{os.Getpid()}, nil
	}}
	pids, procs, skipped, err := New(testConfig).findCUDA(context.Background(), target)
	if err != nil || calls != 2 || len(pids) != 1 || len(procs) != 0 || len(skipped) != 1 {
		t.Fatalf("pids %v procs %v skipped %v err %v after %d listings", pids, procs, skipped, err, calls)
	}

	// A pid that stays gone still fails, naming it.
	target.PIDs = func(context.Context) ([]int, error) { return []int{dead.Process.Pid}, nil }
	if _, _, _, err := New(testConfig).findCUDA(context.Background(), target); !errors.Is(err, cudacr.ErrNoProcess) {
		t.Fatalf("a vanished pid: %v", err)
	}
}
