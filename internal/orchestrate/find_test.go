package orchestrate

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda"
)

// A process that exits between the listing and the scan is no failure: it
// is skipped, and the list is taken again only when every pid is gone.
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
	pids, procs, skipped, err := New(testConfig).env().gpu.find(context.Background(), target)
	if err != nil || calls != 1 || len(pids) != 2 || len(procs) != 0 || len(skipped) != 2 || skipped[1].Reason != "exited during the scan" {
		t.Fatalf("pids %v procs %v skipped %v err %v after %d listings", pids, procs, skipped, err, calls)
	}

	// A listing whose pids are all gone is taken again; staying gone fails.
	calls = 0
	target.PIDs = func(context.Context) ([]int, error) { calls++; return []int{dead.Process.Pid}, nil }
	if _, _, _, err := New(testConfig).env().gpu.find(context.Background(), target); !errors.Is(err, cuda.ErrNoProcess) || calls != findAttempts {
		t.Fatalf("a vanished pid: %v after %d listings", err, calls)
	}
}
