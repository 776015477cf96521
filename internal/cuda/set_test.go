package cuda

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// recorder collects Progress events.
type recorder struct {
	mu     sync.Mutex
	events []Progress
}

func (r *recorder) add(p Progress) { r.mu.Lock(); r.events = append(r.events, p); r.mu.Unlock() }

// phases lists finished steps grouped into runs of one step, each with its
// pids sorted, e.g. "lock{3 5} checkpoint{3 5}": the order inside a phase
// is not defined when its calls run in parallel; the order of the phases is.
func (r *recorder) phases() string {
	var out []string
	var pids []int
	step := ""
	flush := func() {
		if step != "" {
			sort.Ints(pids)
			out = append(out, fmt.Sprintf("%s%v", step, pids))
		}
	}
	for _, e := range r.finished() {
		if e.Step != step {
			flush()
			step, pids = e.Step, nil
		}
		pids = append(pids, e.PID)
	}
	flush()
	return strings.Join(out, " ")
}

func (r *recorder) finished() []Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Progress
	for _, e := range r.events {
		if e.Done {
			out = append(out, e)
		}
	}
	return out
}

// phaseString is the phases() form of steps given as step, pids, step, pids….
func phaseString(parts ...any) string {
	var out []string
	for i := 0; i < len(parts); i += 2 {
		pids := append([]int(nil), parts[i+1].([]int)...)
		sort.Ints(pids)
		out = append(out, fmt.Sprintf("%s%v", parts[i], pids))
	}
	return strings.Join(out, " ")
}

func startApps(t *testing.T, n int) ([]*app, []int) {
	var apps []*app
	var pids []int
	for i := 0; i < n; i++ {
		a := startApp(t)
		apps, pids = append(apps, a), append(pids, a.PID)
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
		wantState(t, d, a.PID, StateCheckpointed)
		if page(t, a.PID).LockTimeout != 3000 {
			t.Fatalf("pid %d: LockTimeout not passed to the driver", a.PID)
		}
	}
	apps[0].AssertStalled(t)
	if got, want := rec.phases(), phaseString("lock", pids, "checkpoint", pids); got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	checkProgress(t, rec)

	t.Setenv("CRYO_FAKE_GPUS", "NVIDIA H100 80GB HBM3|GPU-0b1c2d3e-0000-4000-8000-000000000002|85520809984|9.0")
	pairs := []GPUPair{{Old: "GPU-0b1c2d3e-0000-4000-8000-000000000001", New: "GPU-0b1c2d3e-0000-4000-8000-000000000002"}}
	if err := d.Resume(ctx, pids, SetOptions{GPUPairs: pairs}); err != nil {
		t.Fatal(err)
	}
	for _, a := range apps {
		wantState(t, d, a.PID, StateRunning)
		a.WaitTicks(t, 2)
		if p := page(t, a.PID); p.PairsCount != 1 || fakecuda.FormatUUID(p.Pairs[0][1]) != pairs[0].New {
			t.Fatalf("pid %d: GPU pairs not passed: %+v", a.PID, p)
		}
	}
}

// checkProgress checks that every step of a process has a start, then an
// end with its duration, before that process's next step starts.
func checkProgress(t *testing.T, rec *recorder) {
	t.Helper()
	open := map[int]string{}
	for i, e := range rec.events {
		switch {
		case !e.Done && open[e.PID] == "":
			open[e.PID] = e.Step
		case e.Done && open[e.PID] == e.Step && e.Elapsed > 0:
			delete(open, e.PID)
		default:
			t.Fatalf("progress event %d out of order: %+v (open: %v)", i, e, open)
		}
	}
	if len(open) != 0 {
		t.Fatalf("steps without an end: %v", open)
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
	// The checkpoints run in parallel: the other two completed and are
	// restored; all three are unlocked.
	ok := []int{pids[0], pids[2]}
	want := phaseString("lock", pids, "checkpoint", pids, "restore", ok, "unlock", pids)
	if got := rec.phases(); got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	checkProgress(t, rec)
	for _, a := range apps {
		wantState(t, d, a.PID, StateRunning)
		a.WaitTicks(t, 2)
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
		wantState(t, d, a.PID, StateRunning)
		a.WaitTicks(t, 2)
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
	if err := d.checkpointHeld(ctx, pids[0]); err != nil { // as cryo leaves it: checkpointed and stopped
		t.Fatal(err)
	}
	if err := d.Lock(ctx, pids[1], time.Second); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if err := d.Resume(ctx, pids, SetOptions{OnProgress: rec.add}); err != nil {
		t.Fatal(err)
	}
	want := phaseString("restore", pids[:1], "unlock", pids[:2])
	if got := rec.phases(); got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	rec2 := &recorder{}
	if err := d.Resume(ctx, pids, SetOptions{OnProgress: rec2.add}); err != nil || len(rec2.events) != 0 {
		t.Fatalf("second resume: %v, steps %v; want nothing to do", err, rec2.phases())
	}
	for _, a := range apps {
		a.WaitTicks(t, 2)
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

// TestSuspendRefusesOthersProcess: a process another caller has locked is
// not taken over, and nothing is touched: neither it (its owner resumes
// it) nor the running ones.
func TestSuspendRefusesOthersProcess(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	_, pids := startApps(t, 2)
	if err := d.Lock(ctx, pids[0], time.Second); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	err := d.Suspend(ctx, pids, SetOptions{OnProgress: rec.add})
	if !errors.Is(err, ErrBadState) {
		t.Fatalf("got %v, want ErrBadState", err)
	}
	mustContain(t, err, fmt.Sprint(pids[0]), "locked", "nothing was suspended")
	if got := rec.phases(); got != "" {
		t.Fatalf("driver calls %s, want none", got)
	}
	wantState(t, d, pids[0], StateLocked)
	wantState(t, d, pids[1], StateRunning)
	if err := d.Resume(ctx, pids, SetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSuspendRollbackKeepsOthersLock: another caller locks a member
// between Suspend's state query and its lock. The driver refuses Suspend's
// lock; the rollback unlocks only what Suspend locked itself.
func TestSuspendRollbackKeepsOthersLock(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	_, pids := startApps(t, 2)
	fault(t, "lock", pids[0], "once delay 1000") // Suspend's lock waits, the other's does not
	errc := make(chan error, 1)
	go func() { errc <- d.Suspend(ctx, pids, SetOptions{}) }()
	time.Sleep(300 * time.Millisecond)
	if err := d.Lock(ctx, pids[0], time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrBadState) {
		t.Fatalf("got %v, want ErrBadState", err)
	}
	wantState(t, d, pids[0], StateLocked) // still the other caller's
	wantState(t, d, pids[1], StateRunning)
	if err := d.Unlock(ctx, pids[0]); err != nil {
		t.Fatal(err)
	}
}

func TestSuspendDeadPID(t *testing.T) {
	d := newDriver()
	a := startApp(t)
	dead := deadPID(t)
	err := d.Suspend(context.Background(), []int{a.PID, dead}, SetOptions{})
	if !errors.Is(err, ErrNoProcess) {
		t.Fatalf("got %v, want ErrNoProcess", err)
	}
	wantState(t, d, a.PID, StateRunning)
}

// TestSuspendParallel: the checkpoints of a set overlap (each call in its
// own helper), and the phases stay barriers: no checkpoint starts before
// every lock has ended.
func TestSuspendParallel(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	_, pids := startApps(t, 3)
	for _, p := range pids {
		fault(t, "checkpoint", p, "delay 300")
	}
	rec := &recorder{}
	if err := d.Suspend(ctx, pids, SetOptions{OnProgress: rec.add}); err != nil {
		t.Fatal(err)
	}
	seq := eventString(rec)
	ckpt := strings.Index(seq, "start:checkpoint")
	if strings.Count(seq[:ckpt], "end:lock") != 3 {
		t.Fatalf("a checkpoint started before every lock ended: %s", seq)
	}
	if !strings.HasPrefix(seq[ckpt:], "start:checkpoint start:checkpoint start:checkpoint end:") {
		t.Fatalf("the checkpoints did not overlap: %s", seq)
	}
	checkProgress(t, rec)
	if err := d.Resume(ctx, pids, SetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSuspendSequential: Parallel 1 runs one driver call at a time.
func TestSuspendSequential(t *testing.T) {
	d, ctx := newDriver(), context.Background()
	_, pids := startApps(t, 3)
	rec := &recorder{}
	if err := d.Suspend(ctx, pids, SetOptions{OnProgress: rec.add, Parallel: 1}); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("start:lock end:lock ", 3) + strings.Repeat("start:checkpoint end:checkpoint ", 3)
	if got := eventString(rec) + " "; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	rec = &recorder{}
	if err := d.Resume(ctx, pids, SetOptions{OnProgress: rec.add, Parallel: 1}); err != nil {
		t.Fatal(err)
	}
	want = strings.Repeat("start:restore end:restore ", 3) + strings.Repeat("start:unlock end:unlock ", 3)
	if got := eventString(rec) + " "; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
}

// eventString is the sequence of progress events without pids, e.g.
// "start:lock end:lock".
func eventString(rec *recorder) string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []string
	for _, e := range rec.events {
		kind := "start:"
		if e.Done {
			kind = "end:"
		}
		out = append(out, kind+e.Step)
	}
	return strings.Join(out, " ")
}
