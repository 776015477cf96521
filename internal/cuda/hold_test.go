package cuda

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The fake app's touch thread reads a page the driver maps, every
// millisecond, outside any CUDA call, as libcuda's own threads do. A
// driver checkpoint with the process's threads running kills it
// (SIGSEGV), as it killed a JAX process on a real GPU: the fake catches a
// path that lets threads run while the GPU state is away.
func TestRawCheckpointKillsTheProcess(t *testing.T) {
	t.Setenv("CRYO_FAKE_TOUCH", "1")
	d, a, ctx := newDriver(), startApp(t), context.Background()
	if err := d.Lock(ctx, a.PID, time.Second); err != nil {
		t.Fatal(err)
	}
	d.Checkpoint(ctx, a.PID) // fails, or not, as the process dies
	waitGone(t, a.PID)
}

// Suspend keeps every thread but the driver's restore thread stopped from
// the checkpoint until Resume has restored and unlocked the process: it
// lives through it, stopped while suspended, and its device memory comes
// back intact.
func TestSuspendHoldsThreads(t *testing.T) {
	t.Setenv("CRYO_FAKE_TOUCH", "1")
	d, ctx := newDriver(), context.Background()
	apps, pids := startApps(t, 2)
	if err := d.Suspend(ctx, pids, SetOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range apps {
		if !Stopped(a.PID) || anyThreadIn(a.PID, 'R') || anyThreadIn(a.PID, 'S') {
			t.Fatalf("pid %d is not held stopped while checkpointed", a.PID)
		}
		before := page(t, a.PID).Touches
		time.Sleep(30 * time.Millisecond)
		if after := page(t, a.PID).Touches; after != before {
			t.Fatalf("pid %d: a thread ran while checkpointed (touches %d→%d)", a.PID, before, after)
		}
	}
	if err := d.Resume(ctx, pids, SetOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, a := range apps {
		if Stopped(a.PID) {
			t.Fatalf("pid %d is still stopped after Resume", a.PID)
		}
		a.WaitTicks(t, 3)
	}
}

// A checkpointed process left stopped by a cryo that died (SIGKILL after
// the checkpoint) stays stopped, so it never runs without its GPU state,
// and a later Resume brings it back.
func TestStoppedSurvivesTheHolder(t *testing.T) {
	t.Setenv("CRYO_FAKE_TOUCH", "1")
	d, a, ctx := newDriver(), startApp(t), context.Background()
	if err := d.Lock(ctx, a.PID, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := d.checkpointHeld(ctx, a.PID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if !Stopped(a.PID) {
		t.Fatalf("pid %d runs after its holder let go", a.PID)
	}
	if err := d.Resume(ctx, []int{a.PID}, SetOptions{}); err != nil {
		t.Fatal(err)
	}
	a.WaitTicks(t, 3)
}

// A restore thread that is held stopped cannot do the driver's work: the
// fake's checkpoint then fails (the real driver hangs), as when a hold
// forgets to let it run.
func TestCheckpointNeedsTheRestoreThread(t *testing.T) {
	t.Setenv("CRYO_FAKE_TOUCH", "1")
	d, a, ctx := newDriver(), startApp(t), context.Background()
	if err := d.Lock(ctx, a.PID, time.Second); err != nil {
		t.Fatal(err)
	}
	w, err := stopWorld(ctx, a.PID)
	if err != nil {
		t.Fatal(err)
	}
	err = d.Checkpoint(ctx, a.PID)
	w.detach()
	if err == nil {
		t.Fatal("the checkpoint succeeded with the restore thread stopped")
	}
	if err := d.Resume(ctx, []int{a.PID}, SetOptions{}); err != nil {
		t.Fatal(err)
	}
	a.WaitTicks(t, 3)
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil || threadState(fmt.Sprintf("/proc/%d/stat", pid)) == 'Z' {
			return
		}
	}
	t.Fatalf("pid %d survived a checkpoint with its threads running", pid)
}

// A state query leaves the process as it finds it: a running process is
// held by ptrace alone for the query and runs on after it, never left in a
// group stop of the query's making. And a process another tracer holds is
// refused, after a short wait, naming that tracer.
func TestQueryLeavesTheProcessAsItIs(t *testing.T) {
	d, a, ctx := newDriver(), startApp(t), context.Background()
	w, err := interruptWorld(ctx, a.PID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := interruptWorld(ctx, a.PID); err == nil || !strings.Contains(err.Error(), "traces it") {
		t.Fatalf("a second tracer: %v, want a refusal naming the first", err)
	}
	w.detach()
	if Stopped(a.PID) {
		t.Fatalf("pid %d is stopped after a ptrace-only hold", a.PID)
	}
	if st, err := d.State(ctx, a.PID); err != nil || st != StateRunning {
		t.Fatalf("state %v, %v", st, err)
	}
	a.WaitTicks(t, 3)
}
