package orchestrate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Failures that are not interrupts say the target runs only once a check
// found it so. A failure that took the process with it says which pid
// died, not that it was left running.

// killDead kills pid and waits until it no longer counts as alive.
func killDead(t *testing.T, pid int) {
	t.Helper()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for end := time.Now().Add(5 * time.Second); procfs.Alive(pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("pid %d still alive after SIGKILL", pid)
		}
	}
}

// A pause whose freeze fails says the container was left running, checked;
// one whose freeze failed because the process died says it died.
func TestPauseFailureChecked(t *testing.T) {
	o := New(fakeDriver(t), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	for _, kill := range []bool{false, true} {
		t.Run("killed="+strconv.FormatBool(kill), func(t *testing.T) {
			app := startFakeApp(t)
			target := Target{ID: "standby", PIDs: func(context.Context) ([]int, error) { return []int{app.PID}, nil }}
			freeze := func(context.Context) error {
				if kill {
					killDead(t, app.PID)
				}
				return errors.New("cgroup busy")
			}
			err := o.Pause(context.Background(), target, freeze)
			var se *report.StepError
			if !errors.As(err, &se) || se.Step != string(StepFreeze) {
				t.Fatalf("want a StepError at %s, got %v", StepFreeze, err)
			}
			if !kill {
				for _, want := range []string{"left running with CUDA resumed", "checked: every process was returned to running (1 process, CUDA running)"} {
					if !strings.Contains(se.Outcome, want) {
						t.Errorf("outcome %q lacks %q", se.Outcome, want)
					}
				}
				if se.Fate != report.FateIntact {
					t.Errorf("fate %d, want intact", se.Fate)
				}
				return
			}
			if strings.Contains(se.Outcome, "left running") || strings.Contains(se.Outcome, "returned to running") {
				t.Errorf("outcome %q claims a dead process runs", se.Outcome)
			}
			if want := "process [" + strconv.Itoa(app.PID) + "] died"; !strings.Contains(se.Outcome, want) {
				t.Errorf("outcome %q lacks %q", se.Outcome, want)
			}
			if se.Fate != report.FateLost || !strings.Contains(se.Remedy, "restart the workload") {
				t.Errorf("fate %d, remedy %q: want lost, restart the workload", se.Fate, se.Remedy)
			}
		})
	}
}

// A post-restore hook that fails leaves the restore standing only when
// the restored process still runs after it; one that took the process
// with it fails the restore and names the pid.
func TestPostHookFailureChecked(t *testing.T) {
	o := New(fakeDriver(t), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	for _, kill := range []bool{false, true} {
		t.Run("killed="+strconv.FormatBool(kill), func(t *testing.T) {
			app := startFakeApp(t)
			post := &Hook{Spec: hook.Spec{Kind: hook.KindExec, Argv: []string{"wake"}, Timeout: 10 * time.Second, Text: `exec:["wake"]`},
				Exec: func(context.Context, int, []string) (int, []byte, error) {
					if kill {
						killDead(t, app.PID)
					}
					return 3, []byte("model not loaded"), nil
				}}
			_, err := o.Restore(context.Background(), "c1", manifest.New("c1"), Restorer{
				Restore: func(context.Context) (int, error) { return app.PID, nil },
				Target: func(pid int) Target {
					return Target{ID: "c1", PIDs: func(context.Context) ([]int, error) { return []int{pid}, nil }}
				},
				PostRestore: post,
			})
			var se *report.StepError
			if !errors.As(err, &se) || se.Step != string(StepPostHook) {
				t.Fatalf("want the post-hook's StepError, got %v", err)
			}
			if !kill {
				if !PostHookFailed(err) || se.Outcome != postHookRuns {
					t.Errorf("PostHookFailed %v, outcome %q: want the restore standing, %q", PostHookFailed(err), se.Outcome, postHookRuns)
				}
				app.WaitTicks(t, 2)
				return
			}
			if PostHookFailed(err) {
				t.Errorf("a hook that killed the restored process leaves the restore standing: %v", err)
			}
			if strings.Contains(se.Outcome, "run, with their GPU state") {
				t.Errorf("outcome %q claims a dead process runs", se.Outcome)
			}
			if want := "process [" + strconv.Itoa(app.PID) + "] died"; !strings.Contains(se.Outcome, want) {
				t.Errorf("outcome %q lacks %q", se.Outcome, want)
			}
			if se.Fate != report.FateLostKept || !strings.Contains(se.Remedy, "restore again") {
				t.Errorf("fate %d, remedy %q: want lost-kept, restore again", se.Fate, se.Remedy)
			}
		})
	}
}
