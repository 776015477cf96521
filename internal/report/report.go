// Package report holds cryo's one failure report, StepError, and the
// remedies it carries: typed values attached to causes (WithRemedy) or
// named by key for each front end to word (Key, Wording), so that no
// reader parses a remedy out of a message.
package report

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// StepError is cryo's one failure report, for every front end and every
// operation: which operation on which target failed at which step, why,
// what became of the processes, and one remedy. The runtime's checkpoint
// and restore, the shim and the image commands all return it, so a user
// reads the same shape of message whichever tool they came through.
//
// Its message says each thing once: a StepError that wraps another of the
// same operation and target is one report (the inner step, the outer
// outcome), a cause that begins with the step's name does not repeat it,
// and a cause that carries its own remedy (a Remedied error, or a message
// that arrived as text with "; remedy: " in it) gives the report's one
// remedy.
type StepError struct {
	Op      string // "checkpoint", "restore", "build", "push", "pull", "unpack"
	ID      string // container id, "pid N", or an image reference
	Step    string // the failing step; empty, or equal to Op, for a one-step operation
	Err     error
	LogPath string // CRIU's log, when the failing step has one
	Outcome string // what became of the processes: "the processes were left running, CUDA resumed"
	Remedy  string // the one thing to do, in the words of the front end the user came through
	// Fate is what a check of the workload found when the report was
	// made; the zero value says nothing was checked or nothing was lost.
	Fate Fate
}

// Fate is what became of a workload whose operation failed, as checked
// when the failure was reported: front ends turn it into exit statuses.
type Fate uint8

const (
	FateUnknown  Fate = iota // not checked (nothing was touched), or intact
	FateIntact               // checked: every process runs, CUDA running
	FateLostKept             // a process died, and a complete checkpoint holds the workload
	FateLost                 // a process died, and no complete checkpoint holds it
)

// FateOf is the fate that err's StepError records, or FateUnknown.
func FateOf(err error) Fate {
	var se *StepError
	if errors.As(err, &se) {
		return se.Fate
	}
	return FateUnknown
}

func (e *StepError) Error() string {
	r := e.view()
	var b strings.Builder
	fmt.Fprintf(&b, "%s of %s failed", r.Op, r.ID)
	if r.Step != "" && r.Step != r.Op {
		fmt.Fprintf(&b, " at step %s", r.Step)
	}
	fmt.Fprintf(&b, ": %s", r.cause)
	if r.LogPath != "" {
		fmt.Fprintf(&b, " (CRIU log: %s)", r.LogPath)
	}
	if r.Outcome != "" {
		fmt.Fprintf(&b, "; %s", r.Outcome)
	}
	if r.Remedy != "" {
		return Render(b.String(), r.Remedy)
	}
	return b.String()
}

func (e *StepError) Unwrap() error { return e.Err }

// view is what the message says, once each.
type view struct {
	StepError
	cause string
}

func (e *StepError) view() view {
	r := view{StepError: *e}
	err := e.Err
	for {
		var in *StepError
		if err == nil || !errors.As(err, &in) || in.Op != r.Op || in.ID != r.ID {
			break
		}
		// The same run, reported twice: the inner step is where it
		// failed; the outer knows what became of the processes since.
		r.Step = cmp.Or(in.Step, r.Step)
		r.LogPath = cmp.Or(r.LogPath, in.LogPath)
		r.Outcome = cmp.Or(r.Outcome, in.Outcome)
		r.Remedy = cmp.Or(r.Remedy, in.Remedy)
		err = in.Err
	}
	if err == nil {
		r.cause = "unknown cause"
		return r
	}
	r.cause = err.Error()
	var rm Remedied
	if errors.As(err, &rm) && endsWith(r.cause, rm) {
		// The cause knows better than the step what to do.
		r.cause = strings.TrimSuffix(r.cause, rm.Error()) + rm.Cause()
		r.Remedy = rm.RemedyText()
	}
	if cause, remedy, ok := Split(r.cause); ok {
		// A remedy that reached this process as text: another cryo
		// process's report quoted in an error (the shim's, which
		// containerd returns to a containerd restore as a gRPC message),
		// or a partial checkpoint's record of its failure read back from
		// disk. No value carries it there, so the message is where it is.
		r.cause, r.Remedy = cause, remedy
	}
	r.cause = dropRepeats(r.cause, r.Step, r.Op)
	return r
}

// endsWith says whether rm's remedy is the first one in msg and ends it,
// as it does where rm is wrapped with prefixes only. A cause that quotes
// another failure's message, remedy and all (a partial checkpoint's
// record of its failure), or that goes on after its remedy, is read as
// text, as it always was: its message must not change.
func endsWith(msg string, rm Remedied) bool {
	return strings.HasSuffix(msg, rm.Error()) &&
		strings.Index(msg, remedySep) == len(msg)-len(rm.Error())+len(rm.Cause())
}

// dropRepeats removes from cause the prefixes the report already says
// ("suspend: " at step suspend) and any prefix repeated by layers of
// wrapping ("suspend: suspend: pid 9: lock: …" → "pid 9: lock: …").
func dropRepeats(cause string, said ...string) string {
	parts := strings.Split(cause, ": ")
	out := parts[:0]
	for i, p := range parts {
		if i < len(parts)-1 && len(out) == 0 && p != "" && slices.Contains(said, p) {
			continue
		}
		if len(out) > 0 && out[len(out)-1] == p && !strings.Contains(p, " ") {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}
