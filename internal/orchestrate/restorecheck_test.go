package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// CheckRestore runs as a sequence on the runner: only the steps that apply
// are announced (no interrupted checkpoint to complete, no spec to confine
// to, not the host's network), and its failed step is the error's.
func TestCheckRestoreSteps(t *testing.T) {
	var events []string
	o := New(testConfig, WithEvents(func(e Event) { events = append(events, fmt.Sprintf("%s done=%v", e.Step, e.Done)) }))
	dir := t.TempDir()
	_, err := o.CheckRestore(context.Background(), "c1", dir, GPUScope{})
	var se *report.StepError
	if !errors.As(err, &se) || se.Step != StepVerify || !errors.Is(err, manifest.ErrNotCheckpoint) || se.Outcome != "nothing was restored" || se.Remedy != restoreRemedy(err, dir) {
		t.Fatalf("want the verify step's error, got %#v", err)
	}
	if want := []string{"verify done=false", "verify done=true"}; !reflect.DeepEqual(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
}
