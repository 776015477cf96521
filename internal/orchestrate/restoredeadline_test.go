package orchestrate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/leftovers"
	"github.com/cryo-gpu/cryo/internal/report"
)

func quietOrchestrator(c config.Config) *Orchestrator {
	return New(WithConfig(c), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
}

// A restore that never returns on its own (a hung CRIU) ends at the
// deadline: the front end's clean-up runs, and the error says so.
func TestRestoreDeadlineCutsOffAHungRestore(t *testing.T) {
	o := quietOrchestrator(config.Config{RestoreTimeout: 50 * time.Millisecond})
	cleaned := false
	start := time.Now()
	_, err := o.Restore(context.Background(), "c1", nil, Restorer{
		Restore: func(ctx context.Context) (int, error) {
			<-ctx.Done() // as runc killed at the deadline
			return 0, errors.New("exit status 137")
		},
		Cleanup: func(ctx context.Context) error {
			if ctx.Err() != nil {
				t.Error("the clean-up got the expired context: it could not run")
			}
			cleaned = true
			return nil
		},
		Removed: "the container was removed",
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the restore returned after %s, want about 50ms", took)
	}
	var se *report.StepError
	if !errors.As(err, &se) || !errors.Is(err, ErrRestoreDeadline) || se.Step != StepRestore {
		t.Fatalf("error %v: want a restore-step report.StepError wrapping ErrRestoreDeadline", err)
	}
	if !cleaned {
		t.Error("the front end's clean-up did not run")
	}
	for _, want := range []string{"50ms", config.EnvRestoreTimeout, "nothing was restored; the container was removed", "remedy: if the checkpoint is that large"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// A failed clean-up is in the outcome, not hidden behind "removed".
func TestRestoreFailureReportsFailedCleanup(t *testing.T) {
	o := quietOrchestrator(config.Config{RestoreTimeout: time.Minute})
	_, err := o.Restore(context.Background(), "c1", nil, Restorer{
		Restore: func(context.Context) (int, error) { return 0, errors.New("criu failed: signal: segmentation fault") },
		Cleanup: func(context.Context) error { return leftovers.ErrLeft },
		Removed: "the container was removed",
	})
	if err == nil || strings.Contains(err.Error(), "the container was removed") || !strings.Contains(err.Error(), leftovers.ErrLeft.Error()) {
		t.Fatalf("error %v: want the clean-up's failure, not its success", err)
	}
	if errors.Is(err, ErrRestoreDeadline) {
		t.Errorf("a crash is not a deadline: %v", err)
	}
}

// An invalid CRYO_RESTORE_TIMEOUT refuses the restore before anything runs.
func TestRestoreRefusesInvalidTimeout(t *testing.T) {
	o := quietOrchestrator(config.Config{RestoreTimeoutErr: config.ErrBadRestoreTimeout})
	ran := false
	_, err := o.Restore(context.Background(), "c1", nil, Restorer{
		Restore: func(context.Context) (int, error) { ran = true; return 1, nil },
	})
	if ran || !errors.Is(err, config.ErrBadRestoreTimeout) || !strings.Contains(err.Error(), config.EnvRestoreTimeout) {
		t.Fatalf("ran=%v err=%v: want a refusal naming %s", ran, err, config.EnvRestoreTimeout)
	}
}

// A whole restore's deadline set by the front end (WithRestoreDeadline,
// begun before the unpack) bounds CRIU too, though the CRIU bound of the
// config is longer, and the error names the whole restore's limit.
func TestWholeRestoreDeadlineBoundsCRIU(t *testing.T) {
	o := quietOrchestrator(config.Config{RestoreTimeout: time.Hour})
	ctx, cancel := WithRestoreDeadline(context.Background(), Deadline{Since: time.Now().Add(-900 * time.Millisecond), Limit: time.Second})
	defer cancel()
	start := time.Now()
	_, err := o.Restore(ctx, "c1", nil, Restorer{
		Restore: func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, errors.New("exit status 137")
		},
	})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the restore returned after %s, want the 100ms left of its deadline", took)
	}
	if !errors.Is(err, ErrRestoreDeadline) || !strings.Contains(err.Error(), "within 1s") {
		t.Fatalf("error %v: want ErrRestoreDeadline naming the whole restore's 1s", err)
	}
}

// A CUDA resume that the whole restore's deadline ended says so, in its
// own report (its step and outcome kept); other failures are left as
// they are.
func TestPastDeadlineInResume(t *testing.T) {
	ctx, cancel := WithRestoreDeadline(context.Background(), Deadline{Since: time.Now().Add(-time.Minute), Limit: time.Second})
	defer cancel()
	<-ctx.Done()
	inner := &report.StepError{Op: "restore", ID: "c1", Step: StepResume, Err: errors.New("helper killed: context deadline exceeded"), Outcome: "the restored processes were killed"}
	err := pastDeadlineIn(ctx, "CUDA resume", inner)
	for _, want := range []string{"within 1s (" + config.EnvRestoreTimeout + "): its deadline passed during the CUDA resume", "the restored processes were killed", "remedy: if the checkpoint is that large"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v lacks %q", err, want)
		}
	}
	if !errors.Is(err, ErrRestoreDeadline) {
		t.Errorf("%v does not wrap ErrRestoreDeadline", err)
	}
	other := errors.New("driver said no")
	if got := pastDeadlineIn(context.Background(), "CUDA resume", other); got != other {
		t.Errorf("a failure without a deadline became %v", got)
	}
}
