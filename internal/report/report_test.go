package report

import (
	"errors"
	"fmt"
	"strings"
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

// A remedy that arrived as text (another cryo process's report, quoted
// in an error) gives the report's remedy as a typed one does: the same
// message either way.
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

// refusal is a cause type that knows its remedy, as precheck.Error does.
type refusal struct{ what, remedy string }

func (e *refusal) Error() string      { return Render(e.Cause(), e.remedy) }
func (e *refusal) Cause() string      { return e.what }
func (e *refusal) RemedyText() string { return e.remedy }

// A cause's remedy arrives as a value, whether attached by WithRemedy or
// known by the cause's type, through any prefixes: errors.As finds it, and
// the report prints the cause and that remedy once each, in place of the
// step's own remedy, with the outcome between them.
func TestRemedyArrivesAsValue(t *testing.T) {
	causes := map[string]error{
		"WithRemedy": WithRemedy(errors.New("pid 4 holds /dev/kvm"), "close it first"),
		"Remedied":   &refusal{what: "pid 4 holds /dev/kvm", remedy: "close it first"},
	}
	for name, cause := range causes {
		err := fmt.Errorf("prepare: %w", cause)
		var rm Remedied
		if !errors.As(err, &rm) || rm.RemedyText() != "close it first" || rm.Cause() != "pid 4 holds /dev/kvm" {
			t.Errorf("%s: errors.As gives %v", name, rm)
		}
		se := &StepError{Op: "checkpoint", ID: "pid 4", Step: "prepare", Err: err, Outcome: "nothing was checkpointed", Remedy: "retry"}
		want := "checkpoint of pid 4 failed at step prepare: pid 4 holds /dev/kvm; nothing was checkpointed; remedy: close it first"
		if got := se.Error(); got != want {
			t.Errorf("%s:\n got: %s\nwant: %s", name, got, want)
		}
		if n := strings.Count(se.Error(), remedySep); n != 1 {
			t.Errorf("%s: %d remedies in %q", name, n, se.Error())
		}
	}
}

// A report nested in another of the same run keeps the cause's remedy as
// the one remedy, however many layers the cause went through.
func TestRemedyThroughNestedReports(t *testing.T) {
	inner := &StepError{Op: "restore", ID: "c1", Step: "verify", Err: fmt.Errorf("verify: %w", WithRemedy(errors.New("driver too old"), "upgrade the driver")), Remedy: "check the directory"}
	outer := &StepError{Op: "restore", ID: "c1", Err: inner, Outcome: "nothing was restored"}
	want := "restore of c1 failed at step verify: driver too old; nothing was restored; remedy: upgrade the driver"
	if got := outer.Error(); got != want {
		t.Errorf("\n got: %s\nwant: %s", got, want)
	}
}
