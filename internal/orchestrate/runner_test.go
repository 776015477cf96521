package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/report"
)

// TestRunnerRollback: a failed step undoes the completed steps in reverse,
// skipped ones left out; the earliest step's outcome wins, an undo marked
// last stops the walk, and the failed step itself is never undone.
func TestRunnerRollback(t *testing.T) {
	var trail []string
	mk := func(name string, fail bool, u undone) step {
		return step{name: StepName(name),
			do: func(context.Context) error {
				if fail {
					return errors.New("broken")
				}
				return nil
			},
			undo: func(context.Context) undone { trail = append(trail, "undo "+name); return u }}
	}
	o := New(WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	for _, tc := range []struct {
		name    string
		steps   []step
		undone  []string
		outcome string
	}{
		{"reverse", []step{mk("a", false, undone{outcome: "a undone"}), mk("b", false, undone{outcome: "b undone"}), mk("c", true, undone{outcome: "never"})},
			[]string{"undo b", "undo a"}, "a undone"},
		{"last stops", []step{mk("a", false, undone{outcome: "a undone"}), mk("b", false, undone{outcome: "b gone", last: true}), mk("c", true, undone{})},
			[]string{"undo b"}, "b gone"},
		{"silent keeps", []step{mk("a", false, undone{}), mk("b", false, undone{outcome: "b undone"}), mk("c", true, undone{})},
			[]string{"undo b", "undo a"}, "b undone"},
		{"untouched", []step{mk("a", true, undone{outcome: "never"})}, nil, "untouched"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trail = nil
			var recorded []string
			r := &runner{stepper: o.env().stepper, op: "test", id: "x", steps: tc.steps, untouched: "untouched",
				record: func(s StepName, _ time.Duration, _ error) { recorded = append(recorded, string(s)) },
				failed: func(_ context.Context, s StepName, err error, outcome string) error {
					return &report.StepError{Op: "test", ID: "x", Step: string(s), Err: err, Outcome: outcome}
				}}
			err := r.run(context.Background())
			var se *report.StepError
			if !errors.As(err, &se) || se.Outcome != tc.outcome || !slices.Equal(trail, tc.undone) {
				t.Fatalf("error %v, undos %v; want outcome %q after %v", err, trail, tc.outcome, tc.undone)
			}
			if len(recorded) != len(tc.steps) {
				t.Fatalf("recorded %v, want every step taken", recorded)
			}
			if err := r.run(context.Background()); !errors.Is(err, ErrSequenceState) {
				t.Fatalf("a failed sequence ran again: %v", err)
			}
		})
	}
}

// TestRunnerInterrupted: a cancelled run stops before its next step,
// records it with the cause, and still undoes what was done.
func TestRunnerInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	undid := false
	r := &runner{stepper: New(WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))).env().stepper, op: "test", id: "x", interruptible: true,
		steps: []step{
			{name: "a", do: func(context.Context) error { cancel(); return nil }, undo: func(context.Context) undone { undid = true; return undone{} }},
			{name: "b", do: func(context.Context) error { t.Fatal("b ran after the cancel"); return nil }},
		},
		record: func(s StepName, _ time.Duration, err error) {
			if s == "b" && !errors.Is(err, context.Canceled) {
				t.Errorf("b recorded with %v, want the cancel", err)
			}
		},
		failed: func(_ context.Context, s StepName, err error, _ string) error { return err },
	}
	err := r.run(ctx)
	if !undid || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped before this step") {
		t.Fatalf("interrupted run: %v (undone %v)", err, undid)
	}
}

// The table a sweep reads: a bare CUDA checkpoint takes every step but the
// thaw (no cgroup) and, without --leave-running, the resume.
func TestCheckpointSteps(t *testing.T) {
	got := fmt.Sprint(CheckpointSteps(true, false))
	if want := "[find inventory suspend manifest dump digests final]"; got != want {
		t.Errorf("CheckpointSteps(cuda, !leaveRunning) = %s, want %s", got, want)
	}
	if got := fmt.Sprint(CheckpointSteps(false, true)); got != "[find manifest dump digests final]" {
		t.Errorf("CheckpointSteps(!cuda, leaveRunning) = %s", got)
	}
	// The shim's: thawed after containerd's pause, CUDA suspended by it.
	if got := fmt.Sprint(PausedCheckpointSteps(true)); got != "[thaw find inventory manifest dump digests final]" {
		t.Errorf("PausedCheckpointSteps(leaveRunning) = %s", got)
	}
}

// The restore table a sweep reads: a completed checkpoint outside the
// host's network skips the completion and the ports wait, and a bare tree,
// with no spec, the confinement.
func TestRestoreSteps(t *testing.T) {
	if got, want := fmt.Sprint(RestoreSteps(true)), "[verify confine restore resume]"; got != want {
		t.Errorf("RestoreSteps(container) = %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(RestoreSteps(false)), "[verify restore resume]"; got != want {
		t.Errorf("RestoreSteps(bare) = %s, want %s", got, want)
	}
}

// The pause table a sweep reads: a container with a CUDA process and no
// pre-checkpoint hook.
func TestPauseSteps(t *testing.T) {
	if got, want := fmt.Sprint(PauseSteps()), "[find inventory suspend record freeze]"; got != want {
		t.Errorf("PauseSteps() = %s, want %s", got, want)
	}
}

// TestRunnerSoftStep: a soft step's failure is recorded and kept, nothing
// is undone, and the steps after it run.
func TestRunnerSoftStep(t *testing.T) {
	var trail []string
	mk := func(name string, err error, soft bool) step {
		return step{name: StepName(name), soft: soft,
			do:   func(context.Context) error { trail = append(trail, name); return err },
			undo: func(context.Context) undone { trail = append(trail, "undo "+name); return undone{} }}
	}
	o := New(WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	var recorded []string
	hookErr := errors.New("hook said no")
	r := &runner{stepper: o.env().stepper, op: "test", id: "x",
		steps:  []step{mk("a", nil, false), mk("hook", hookErr, true), mk("b", nil, false), mk("hook2", errors.New("later"), true)},
		record: func(s StepName, _ time.Duration, err error) { recorded = append(recorded, fmt.Sprint(s, " ", err)) },
		failed: func(context.Context, StepName, error, string) error {
			t.Fatal("a soft failure failed the sequence")
			return nil
		}}
	if err := r.run(context.Background()); err != nil || r.state != seqDone {
		t.Fatalf("run: %v in state %s, want done", err, r.state)
	}
	if !errors.Is(r.kept, hookErr) || !slices.Equal(trail, []string{"a", "hook", "b", "hook2"}) {
		t.Fatalf("kept %v after %v; want the first soft failure, every step taken, none undone", r.kept, trail)
	}
	if recorded[1] != "hook hook said no" {
		t.Fatalf("recorded %v, want the soft step with its error", recorded)
	}
}

// TestRunnerDone: the runner's record of completed steps is what a
// sequence asks: a skipped or failed step is not done, a step done
// outside the run is, and one whose undo gave its work back is no longer.
func TestRunnerDone(t *testing.T) {
	ok := func(context.Context) error { return nil }
	r := &runner{stepper: New(WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))).env().stepper, op: "test", id: "x",
		steps: []step{
			{name: "kept", do: ok, undo: func(context.Context) undone { return undone{} }},
			{name: "given", do: ok, undo: func(context.Context) undone { return undone{gaveBack: true} }},
			{name: "skipped", do: ok, skip: func() bool { return true }},
			{name: "broken", do: func(context.Context) error { return errors.New("broken") }},
		},
		failed: func(_ context.Context, _ StepName, err error, _ string) error { return err }}
	r.doneOutside("outside")
	if (*runner)(nil).Done("kept") {
		t.Fatal("a runner that never ran has done a step")
	}
	if err := r.run(context.Background()); err == nil {
		t.Fatal("the broken step did not fail the run")
	}
	for name, want := range map[StepName]bool{"outside": true, "kept": true, "given": false, "skipped": false, "broken": false} {
		if got := r.Done(name); got != want {
			t.Errorf("Done(%s) = %v, want %v", name, got, want)
		}
	}
}
