package cli

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// An interrupted restore's remedy is the command line that restored, as a
// shell reads it back; other failures keep their own remedy.
func TestRetryRemedy(t *testing.T) {
	se := &report.StepError{Op: "restore", ID: "checkpoint /d", Step: "restore",
		Err: fmt.Errorf("%w: %w", orchestrate.ErrRestoreInterrupted, context.Canceled), Remedy: orchestrate.RestoreRetryRemedy}
	args := []string{"/usr/local/bin/cryo", "restore", "--dir", "/ck pt/it's", "--gpu-map=a=b"}
	err := withRetry(se, args)
	want := "the checkpoint was not changed and is whole: run `cryo restore --dir '/ck pt/it'\\''s' --gpu-map=a=b` to restore it again"
	if se.Remedy != want || !errors.Is(err, orchestrate.ErrRestoreInterrupted) {
		t.Fatalf("remedy %q, want %q", se.Remedy, want)
	}
	other := &report.StepError{Op: "restore", ID: "x", Err: errors.New("criu failed"), Remedy: "read the log"}
	if withRetry(other, args); other.Remedy != "read the log" {
		t.Fatalf("a failure's remedy was replaced: %q", other.Remedy)
	}
}
