package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

func TestTransitions(t *testing.T) {
	// The driver's raw transitions, one call at a time, with no thread
	// held (the app's touch thread, which would fault on a checkpointed
	// process, is off: TestSuspendHoldsThreads).
	t.Setenv("CRYO_FAKE_TOUCH", "0")
	d, a, ctx := newDriver(), startApp(t), context.Background()
	wantState(t, d, a.PID, StateRunning)

	if err := d.Lock(ctx, a.PID, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	wantState(t, d, a.PID, StateLocked)
	a.AssertStalled(t)
	if got := page(t, a.PID).LockTimeout; got != 2000 {
		t.Fatalf("lock timeoutMs %d, want 2000", got)
	}

	if err := d.Checkpoint(ctx, a.PID); err != nil {
		t.Fatal(err)
	}
	wantState(t, d, a.PID, StateCheckpointed)
	a.AssertStalled(t)

	// The restoring host (the helper's GPU table) has the new GPU, not the old.
	t.Setenv("CRYO_FAKE_GPUS", "NVIDIA H100 80GB HBM3|GPU-aabbccdd-1111-4222-8333-444455556666|85520809984|9.0")
	pairs := []GPUPair{{Old: "GPU-0b1c2d3e-0000-4000-8000-000000000001", New: "GPU-aabbccdd-1111-4222-8333-444455556666"}}
	if err := d.Restore(ctx, a.PID, pairs); err != nil {
		t.Fatal(err)
	}
	wantState(t, d, a.PID, StateLocked)
	p := page(t, a.PID)
	if p.PairsCount != 1 || fakecuda.FormatUUID(p.Pairs[0][0]) != pairs[0].Old || fakecuda.FormatUUID(p.Pairs[0][1]) != pairs[0].New {
		t.Fatalf("driver got pairs %d %x, want %v", p.PairsCount, p.Pairs, pairs)
	}

	if err := d.Unlock(ctx, a.PID); err != nil {
		t.Fatal(err)
	}
	wantState(t, d, a.PID, StateRunning)
	a.WaitTicks(t, 3) // and the device memory came back intact
	p = page(t, a.PID)
	if p.Locks != 1 || p.Checkpoints != 1 || p.Restores != 1 || p.Unlocks != 1 {
		t.Fatalf("driver counters %+v", p)
	}
}

// The restore thread is the one the driver runs its actions on inside the
// process: the fake's device thread, not the main thread.
func TestRestoreThreadID(t *testing.T) {
	d, a := newDriver(), startApp(t)
	tid, err := d.RestoreThreadID(context.Background(), a.PID)
	if want := page(t, a.PID).RestoreTID; err != nil || tid != want || tid == a.PID {
		t.Fatalf("tid %d, %v; want the device thread %d", tid, err, want)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", a.PID, tid)); err != nil {
		t.Fatalf("restore thread %d is not a thread of %d: %v", tid, a.PID, err)
	}
}

func TestWrongState(t *testing.T) {
	d, a, ctx := newDriver(), startApp(t), context.Background()
	for name, call := range map[string]func() error{
		"unlock":     func() error { return d.Unlock(ctx, a.PID) },
		"checkpoint": func() error { return d.Checkpoint(ctx, a.PID) },
		"restore":    func() error { return d.Restore(ctx, a.PID, nil) },
	} {
		err := call()
		var derr *DriverError
		if !errors.Is(err, ErrBadState) || !errors.As(err, &derr) || derr.Code != 401 || derr.Name != "CUDA_ERROR_ILLEGAL_STATE" {
			t.Fatalf("%s on a running process: %v, want CUDA_ERROR_ILLEGAL_STATE", name, err)
		}
		mustContain(t, err, name, fmt.Sprint(a.PID))
	}
	wantState(t, d, a.PID, StateRunning)
}

func TestDriverErrorInjected(t *testing.T) {
	d, a := newDriver(), startApp(t)
	fault(t, "lock", a.PID, "error 2 once")
	err := d.Lock(context.Background(), a.PID, time.Second)
	var derr *DriverError
	if !errors.As(err, &derr) || derr.Code != 2 || derr.Op != "lock" || derr.PID != a.PID || derr.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("got %v, want CUDA_ERROR_OUT_OF_MEMORY from lock", err)
	}
	if _, err := os.Stat(filepath.Join(faultsDir, fmt.Sprintf("lock.%d", a.PID))); !os.IsNotExist(err) {
		t.Fatalf("a once fault should delete its file: %v", err)
	}
	if err := d.Lock(context.Background(), a.PID, time.Second); err != nil {
		t.Fatalf("second lock: %v", err)
	}
	if err := d.Unlock(context.Background(), a.PID); err != nil {
		t.Fatal(err)
	}
}

func TestHangIsKilledAtDeadline(t *testing.T) {
	a := startApp(t)
	d := New(Options{LibPath: fakes.LibCUDA, CallTimeout: 300 * time.Millisecond})
	fault(t, "state", a.PID, "hang")
	start := time.Now()
	_, err := d.State(context.Background(), a.PID)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("took %s; the helper was not killed at its deadline", el)
	}
	mustContain(t, err, "state", fmt.Sprint(a.PID), "300ms", "thaw")
}

func TestContextDeadlineKillsHelper(t *testing.T) {
	d, a := newDriver(), startApp(t)
	fault(t, "checkpoint", a.PID, "hang")
	if err := d.Lock(context.Background(), a.PID, time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := d.Checkpoint(ctx, a.PID)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrTimeout and DeadlineExceeded", err)
	}
	wantState(t, d, a.PID, StateLocked)
	if err := d.Unlock(context.Background(), a.PID); err != nil {
		t.Fatal(err)
	}
}

func TestMissingLibrary(t *testing.T) {
	d := New(Options{LibPath: "/nonexistent/libcuda.so.1"})
	_, err := d.Probe(context.Background())
	if !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("probe: %v, want ErrLibraryNotFound", err)
	}
	mustContain(t, err, "/nonexistent/libcuda.so.1", config.EnvLibCUDA)
	if _, err := d.State(context.Background(), os.Getpid()); !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("state: %v, want ErrLibraryNotFound", err)
	}
}

// The library path is the option's, else the soname; the environment is
// read by the entry points (config), never here.
func TestLibraryPath(t *testing.T) {
	t.Setenv(config.EnvLibCUDA, fakes.OldLibCUDA)
	if got := New(Options{}).libPath(); got != "libcuda.so.1" {
		t.Fatalf("lib path %q, want libcuda.so.1", got)
	}
	if got := New(Options{LibPath: "x"}).libPath(); got != "x" {
		t.Fatalf("Options.LibPath must win, got %q", got)
	}
}

func TestNoCheckpointAPI(t *testing.T) {
	d := New(Options{LibPath: fakes.OldLibCUDA})
	info, err := d.Probe(context.Background())
	if !errors.Is(err, ErrNoCheckpointAPI) || info.CheckpointAPI || len(info.Missing) != 6 || info.DriverVersion != 12020 {
		t.Fatalf("probe: %+v, %v; want no checkpoint API", info, err)
	}
	mustContain(t, err, "570", "12.2")
	a := startApp(t)
	if err := d.Lock(context.Background(), a.PID, time.Second); !errors.Is(err, ErrNoCheckpointAPI) {
		t.Fatalf("lock: %v, want ErrNoCheckpointAPI", err)
	}
}

func TestProbe(t *testing.T) {
	info, err := newDriver().Probe(context.Background())
	if err != nil || !info.CheckpointAPI || info.DriverVersion != 13000 || info.LibPath != fakes.LibCUDA {
		t.Fatalf("probe: %+v, %v", info, err)
	}
}

func TestDeadPID(t *testing.T) {
	pid := deadPID(t)
	_, err := newDriver().State(context.Background(), pid)
	if !errors.Is(err, ErrNoProcess) {
		t.Fatalf("got %v, want ErrNoProcess", err)
	}
	mustContain(t, err, fmt.Sprint(pid))
}

func TestNotCUDA(t *testing.T) {
	pid := plainProcess(t)
	_, err := newDriver().State(context.Background(), pid)
	if !errors.Is(err, ErrNotCUDA) {
		t.Fatalf("got %v, want ErrNotCUDA", err)
	}
}

func TestBadUUID(t *testing.T) {
	a := startApp(t)
	err := newDriver().Restore(context.Background(), a.PID, []GPUPair{{Old: "GPU-1", New: "GPU-2"}})
	if !errors.Is(err, ErrBadUUID) {
		t.Fatalf("got %v, want ErrBadUUID", err)
	}
}
