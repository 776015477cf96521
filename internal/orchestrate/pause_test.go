package orchestrate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// TestPauseResume: a pause suspends CUDA (the fake frees the device
// memory) before it freezes; a checkpoint of the paused target dumps the
// process as it is, records the GPU memory the pause saw, and leaves it
// suspended; the resume thaws first, then brings CUDA back intact.
func TestPauseResume(t *testing.T) {
	o := New(fakeDriver(t), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	app := startFakeApp(t)
	target := Target{ID: "standby", PIDs: func(context.Context) ([]int, error) { return []int{app.PID}, nil }}
	var order []string
	freeze := func(context.Context) error { order = append(order, "freeze:"+cudaState(t, o, app.PID)); return nil }
	thaw := func(context.Context) error { order = append(order, "thaw:"+cudaState(t, o, app.PID)); return nil }
	if err := o.Pause(context.Background(), target, freeze); err != nil {
		t.Fatal(err)
	}
	if len(order) != 1 || order[0] != "freeze:checkpointed" {
		t.Fatalf("calls %v, want one freeze after the suspend", order)
	}
	app.AssertStalled(t)

	dir := t.TempDir()
	dump := func(context.Context) error {
		return os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("x"), 0o600)
	}
	m, err := o.Checkpoint(context.Background(), target, dir, true, dump)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Processes) != 1 || !m.Processes[0].Paused || m.Processes[0].GPUMemory == 0 || len(StillSuspended(m)) != 0 {
		t.Fatalf("manifest processes %+v: want the paused one with the memory it held", m.Processes)
	}
	if st := cudaState(t, o, app.PID); st != "checkpointed" {
		t.Fatalf("after the checkpoint of the paused target CUDA is %s, want checkpointed (the resume's)", st)
	}

	if err := o.Resume(context.Background(), target, thaw); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[1] != "thaw:checkpointed" || cudaState(t, o, app.PID) != "running" {
		t.Fatalf("calls %v, CUDA %s: want the thaw first, then CUDA running", order, cudaState(t, o, app.PID))
	}
	app.WaitTicks(t, 3) // the fake app checks its device memory every tick
	if r, _ := o.env().locks.pauses().read(target.ID); r != nil {
		t.Fatalf("pause record left after the resume: %+v", r)
	}
}

// TestPauseRollsBack: a refused suspend or a failed freeze leaves the
// target running with CUDA running and no record, with a StepError.
func TestPauseRollsBack(t *testing.T) {
	o := New(fakeDriver(t), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	for _, step := range []StepName{StepSuspend, StepFreeze} {
		t.Run(string(step), func(t *testing.T) {
			app := startFakeApp(t)
			target := Target{ID: "standby-" + string(step), PIDs: func(context.Context) ([]int, error) { return []int{app.PID}, nil }}
			froze := false
			freeze := func(context.Context) error { froze = true; return errors.New("cgroup busy") }
			if step == StepSuspend {
				fault(t, "lock", app.PID, "error 2")
			}
			err := o.Pause(context.Background(), target, freeze)
			var se *report.StepError
			if !errors.As(err, &se) || se.Step != string(step) || se.Remedy == "" {
				t.Fatalf("want a report.StepError at %s with a remedy, got %v", step, err)
			}
			if froze != (step == StepFreeze) || cudaState(t, o, app.PID) != "running" {
				t.Fatalf("froze %v, CUDA %s after a failure at %s: want running", froze, cudaState(t, o, app.PID), step)
			}
			if r, _ := o.env().locks.pauses().read(target.ID); r != nil {
				t.Fatalf("pause record left: %+v", r)
			}
			app.WaitTicks(t, 3)
		})
	}
}

func cudaState(t *testing.T, o *Orchestrator, pid int) string {
	st, err := o.driver().State(context.Background(), pid)
	if err != nil {
		t.Fatalf("CUDA state of %d: %v", pid, err)
	}
	return st.String()
}

// TestGPUFreePauseOptOut: the annotation decides for its container, the
// configuration for the others.
func TestGPUFreePauseOptOut(t *testing.T) {
	o := New()
	if !o.GPUFreePause(nil) || o.GPUFreePause(map[string]string{AnnGPUFreePause: "false"}) {
		t.Fatal("default: GPU-free unless the annotation says false")
	}
	o.Config.FreezeOnlyPause = true
	if o.GPUFreePause(nil) || !o.GPUFreePause(map[string]string{AnnGPUFreePause: "true"}) {
		t.Fatal("CRYO_GPU_FREE_PAUSE=0: freeze-only unless the annotation says true")
	}
}

// A pause record whose processes are zombies is stale: they died, and
// nobody will resume their GPU state.
func TestAnyAliveZombie(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(5 * time.Second); procfs.State(pid) != "Z"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never became a zombie (state %q)", pid, procfs.State(pid))
		}
	}
	if anyAlive([]int{pid}) {
		t.Fatalf("zombie %d counted as alive", pid)
	}
	if !anyAlive([]int{pid, os.Getpid()}) {
		t.Fatal("this test's own process not counted as alive")
	}
}
