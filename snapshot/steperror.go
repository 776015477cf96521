package snapshot

import (
	"fmt"
	"strings"
)

// StepError is cryo's one failure report, for every front end and every
// operation: which operation on which target failed at which step, why,
// what became of the processes, and one remedy. The runtime's checkpoint
// and restore, the shim and the image commands all return it, so a user
// reads the same shape of message whichever tool they came through.
type StepError struct {
	Op      string // "checkpoint", "restore", "build", "push", "pull", "unpack"
	ID      string // container id, "pid N", or an image reference
	Step    string // the failing step; empty, or equal to Op, for a one-step operation
	Err     error
	LogPath string // CRIU's log, when the failing step has one
	Outcome string // what became of the processes: "the processes were left running, CUDA resumed"
	Remedy  string
}

func (e *StepError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s of %s failed", e.Op, e.ID)
	if e.Step != "" && e.Step != e.Op {
		fmt.Fprintf(&b, " at step %s", e.Step)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if e.LogPath != "" {
		fmt.Fprintf(&b, " (CRIU log: %s)", e.LogPath)
	}
	if e.Outcome != "" {
		fmt.Fprintf(&b, "; %s", e.Outcome)
	}
	if e.Remedy != "" {
		fmt.Fprintf(&b, "; remedy: %s", e.Remedy)
	}
	return b.String()
}

func (e *StepError) Unwrap() error { return e.Err }
