package report

import (
	"errors"
	"fmt"
	"testing"
)

// A remedy attached as a value reads as it did written into the message,
// alone and inside a report, where it becomes the report's one remedy.
func TestWithRemedy(t *testing.T) {
	cause := WithRemedy(fmt.Errorf("read /etc/cryo.toml: %w", errors.New("bad line 3")), "fix the file")
	if got, want := cause.Error(), "read /etc/cryo.toml: bad line 3; remedy: fix the file"; got != want {
		t.Errorf("alone:\n got: %s\nwant: %s", got, want)
	}
	se := &StepError{Op: "restore", ID: "c1", Step: "verify", Err: fmt.Errorf("verify: config: %w", cause), Outcome: "nothing was restored", Remedy: "retry"}
	want := "restore of c1 failed at step verify: config: read /etc/cryo.toml: bad line 3; nothing was restored; remedy: fix the file"
	if got := se.Error(); got != want {
		t.Errorf("in a report:\n got: %s\nwant: %s", got, want)
	}
	if WithRemedy(nil, "x") != nil {
		t.Error("WithRemedy(nil) is not nil")
	}
	var rm Remedied
	if !errors.As(se, &rm) || rm.RemedyText() != "fix the file" {
		t.Errorf("the remedy is not a value of the chain: %v", rm)
	}
}

// A remedy still written into a cause's message gives the report's remedy
// as a typed one does: the same message either way.
func TestRemedyInMessage(t *testing.T) {
	typed := &StepError{Op: "checkpoint", ID: "pid 7", Err: WithRemedy(errors.New("criu 3.15 too old"), "install CRIU 4.0")}
	written := &StepError{Op: "checkpoint", ID: "pid 7", Err: errors.New("criu 3.15 too old; remedy: install CRIU 4.0")}
	if typed.Error() != written.Error() {
		t.Errorf("typed %q, written %q", typed.Error(), written.Error())
	}
}

// A cause that quotes another failure's message, remedy and all, reads as
// it did when its own remedy was text: the first remedy is the report's,
// with the rest of the message after it.
func TestRemedyQuoted(t *testing.T) {
	quoted := "checkpoint of pid 7 failed at step manifest: disk full; remedy: free space, then retry"
	typed := &StepError{Op: "restore", ID: "d", Err: WithRemedy(fmt.Errorf("it failed (%s): %w", quoted, errors.New("partial")), "re-take it")}
	written := &StepError{Op: "restore", ID: "d", Err: fmt.Errorf("it failed (%s): %w; remedy: re-take it", quoted, errors.New("partial"))}
	if typed.Error() != written.Error() {
		t.Errorf("typed:\n%s\nwritten:\n%s", typed.Error(), written.Error())
	}
	later := &StepError{Op: "restore", ID: "d", Err: fmt.Errorf("%w (then more)", WithRemedy(errors.New("bad"), "fix it"))}
	if got, want := later.Error(), "restore of d failed: bad; remedy: fix it (then more)"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// The report says each prefix once and names an unknown cause.
func TestStepErrorSaysOnce(t *testing.T) {
	se := &StepError{Op: "checkpoint", ID: "pid 9", Step: "suspend", Err: errors.New("suspend: suspend: pid 9: lock: busy")}
	if got, want := se.Error(), "checkpoint of pid 9 failed at step suspend: pid 9: lock: busy"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got, want := (&StepError{Op: "push", ID: "r"}).Error(), "push of r failed: unknown cause"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
