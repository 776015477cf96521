package cudacr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// recorder collects Progress events.
type recorder struct {
	mu     sync.Mutex
	events []Progress
}

func (r *recorder) add(p Progress) { r.mu.Lock(); r.events = append(r.events, p); r.mu.Unlock() }

// steps lists finished steps as "step:pid".
func (r *recorder) steps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.Done {
			out = append(out, fmt.Sprintf("%s:%d", e.Step, e.PID))
		}
	}
	return out
}

func startApps(t *testing.T, n int) ([]*app, []int) {
	var apps []*app
	var pids []int
	for i := 0; i < n; i++ {
		a := startApp(t)
		apps, pids = append(apps, a), append(pids, a.pid)
	}
	return apps, pids
}

func TestSuspendResume(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	apps, pids := startApps(t, 2)
	rec := &recorder{}
	if err := d.Suspend(ctx, pids, SetOptions{LockTimeout: 3 * time.Second, OnProgress: rec.add}); err != nil {
		t.Fatal(err)
	}
	for _, a := range apps {
		wantState(t, d, a.pid, StateCheckpointed)
		if page(t, a.pid).LockTimeout != 3000 {
			t.Fatalf("pid %d: LockTimeout not passed to the driver", a.pid)
		}
	}
	apps[0].assertStalled(t)
	want := fmt.Sprintf("[lock:%d lock:%d checkpoint:%d checkpoint:%d]", pids[0], pids[1], pids[0], pids[1])
	if got := fmt.Sprint(rec.steps()); got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	checkProgress(t, rec)

	pairs := []GPUPair{{Old: "GPU-0b1c2d3e-0000-4000-8000-000000000001", New: "GPU-0b1c2d3e-0000-4000-8000-000000000002"}}
	if err := d.Resume(ctx, pids, SetOptions{GPUPairs: pairs}); err != nil {
		t.Fatal(err)
	}
	for _, a := range apps {
		wantState(t, d, a.pid, StateRunning)
		a.waitTicks(t, 2)
		if p := page(t, a.pid); p.PairsCount != 1 || FormatUUID(p.Pairs[0][1]) != pairs[0].New {
			t.Fatalf("pid %d: GPU pairs not passed: %+v", a.pid, p)
		}
	}
}

// checkProgress checks that every step has a start and an end, in order.
func checkProgress(t *testing.T, rec *recorder) {
	t.Helper()
	for i := 0; i+1 < len(rec.events); i += 2 {
		s, e := rec.events[i], rec.events[i+1]
		if s.Done || !e.Done || s.Step != e.Step || s.PID != e.PID || e.Elapsed <= 0 {
			t.Fatalf("progress events %d,%d: %+v %+v", i, i+1, s, e)
		}
	}
}

func TestSuspendFailureRollsBack(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	apps, pids := startApps(t, 3)
	fault(t, "checkpoint", pids[1], "error 2")
	rec := &recorder{}
	err := d.Suspend(ctx, pids, SetOptions{OnProgress: rec.add})
	var derr *DriverError
	if !errors.As(err, &derr) || derr.Code != 2 || derr.PID != pids[1] {
		t.Fatalf("got %v, want the injected error of pid %d", err, pids[1])
	}
	mustContain(t, err, fmt.Sprintf("pid %d: checkpoint", pids[1]), "returned to running")
	want := fmt.Sprintf("[lock:%d lock:%d lock:%d checkpoint:%d checkpoint:%d restore:%d unlock:%d unlock:%d unlock:%d]",
		pids[0], pids[1], pids[2], pids[0], pids[1], pids[0], pids[0], pids[1], pids[2])
	if got := fmt.Sprint(rec.steps()); got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	for _, a := range apps {
		wantState(t, d, a.pid, StateRunning)
		a.waitTicks(t, 2)
	}
}

func TestSuspendLockHangRollsBack(t *testing.T) {
	d := New(Options{LibPath: fakes.LibCUDA, CallTimeout: time.Second})
	apps, pids := startApps(t, 2)
	fault(t, "lock", pids[1], "hang once")
	err := d.Suspend(context.Background(), pids, SetOptions{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	mustContain(t, err, fmt.Sprintf("pid %d: lock", pids[1]))
	for _, a := range apps {
		wantState(t, d, a.pid, StateRunning)
		a.waitTicks(t, 2)
	}
}

func TestSuspendRollbackFailureIsReported(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	_, pids := startApps(t, 2)
	fault(t, "checkpoint", pids[1], "error 2")
	fault(t, "restore", pids[0], "error 999 once")
	err := d.Suspend(ctx, pids, SetOptions{})
	mustContain(t, err, "cryo cuda resume", fmt.Sprintf("pid %d: restore", pids[0]))
	// A later Resume repairs it.
	if err := d.Resume(ctx, pids, SetOptions{}); err != nil {
		t.Fatal(err)
	}
	wantState(t, d, pids[0], StateRunning)
}

func TestResumeIdempotent(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	apps, pids := startApps(t, 3)
	// One checkpointed, one locked, one running: what a killed caller leaves.
	if err := d.Lock(ctx, pids[0], time.Second); err != nil {
		t.Fatal(err)
	}
	if err := d.Checkpoint(ctx, pids[0]); err != nil {
		t.Fatal(err)
	}
	if err := d.Lock(ctx, pids[1], time.Second); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := d.Resume(ctx, pids, SetOptions{OnProgress: rec.add}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[restore:%d unlock:%d unlock:%d]", pids[0], pids[0], pids[1])
	if got := fmt.Sprint(rec.steps()); got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	rec2 := &recorder{}
	if err := d.Resume(ctx, pids, SetOptions{OnProgress: rec2.add}); err != nil || len(rec2.events) != 0 {
		t.Fatalf("second resume: %v, steps %v; want nothing to do", err, rec2.steps())
	}
	for _, a := range apps {
		a.waitTicks(t, 2)
	}
}

func TestResumeFailedProcess(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	_, pids := startApps(t, 2)
	if err := d.Lock(ctx, pids[0], time.Second); err != nil {
		t.Fatal(err)
	}
	fault(t, "checkpoint", pids[0], "failed once")
	if err := d.Checkpoint(ctx, pids[0]); err == nil {
		t.Fatal("injected failure did not fire")
	}
	err := d.Resume(ctx, pids, SetOptions{})
	if !errors.Is(err, ErrBadState) {
		t.Fatalf("got %v, want ErrBadState for a failed process", err)
	}
	mustContain(t, err, fmt.Sprint(pids[0]), "restart")
	wantState(t, d, pids[1], StateRunning)
}

func TestSuspendSkipsAlreadySuspended(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	_, pids := startApps(t, 2)
	if err := d.Lock(ctx, pids[0], time.Second); err != nil {
		t.Fatal(err)
	}
	if err := d.Suspend(ctx, pids, SetOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		wantState(t, d, p, StateCheckpointed)
	}
	if err := d.Resume(ctx, pids, SetOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestSuspendDeadPID(t *testing.T) {
	d := newDriver()
	a := startApp(t)
	dead := deadPID(t)
	err := d.Suspend(context.Background(), []int{a.pid, dead}, SetOptions{})
	if !errors.Is(err, ErrNoProcess) {
		t.Fatalf("got %v, want ErrNoProcess", err)
	}
	wantState(t, d, a.pid, StateRunning)
}
