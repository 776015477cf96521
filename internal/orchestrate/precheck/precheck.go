// Package precheck holds the checks a checkpoint or restore makes before it
// touches anything: who runs it, whether the pids a restore needs are free,
// whether a process tree is a shell job or lives in a container, whether a
// Podman name is free. Each refusal is an *Error with one remedy, whose
// Usage says whether the invocation itself was wrong (a CLI's exit code 2).
package precheck

import (
	"errors"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Sentinels of the refusals; test with errors.Is.
var (
	ErrNotRoot     = errors.New("not running as root")
	ErrPIDInUse    = errors.New("pid of the checkpoint in use")
	ErrShellJob    = errors.New("process tree attached to a terminal")
	ErrInContainer = errors.New("process in a container")
	ErrNameInUse   = errors.New("container name in use")
	// ErrContainerTree: a bare restore of a container's checkpoint.
	ErrContainerTree = errors.New("a container's checkpoint, not a process tree's")
)

// Error is a refused pre-check: nothing was touched.
type Error struct {
	Err    error  // one of the sentinels
	Detail string // what was found: "pid 4242 is held by sleep (pid 4242)"
	Remedy string // the one thing to do
}

func (e *Error) Error() string {
	return report.Render(e.Cause(), e.Remedy)
}

func (e *Error) Unwrap() error { return e.Err }

// Cause is the message without the remedy, for a report that prints the
// remedy itself (report.StepError).
func (e *Error) Cause() string { return fmt.Sprintf("%s: %s", e.Err, e.Detail) }

// RemedyText is the remedy alone.
func (e *Error) RemedyText() string { return e.Remedy }

// Usage says whether the invocation was wrong (missing privilege, a flag
// missing, a pid or name that does not fit the command): a CLI exits 2, or
// 77 (not permitted) for ErrNotRoot.
// A pid in use is the host's state, not the invocation's: exit 1.
func (e *Error) Usage() bool { return !errors.Is(e.Err, ErrPIDInUse) }

// IsUsage reports whether err holds a pre-check refusal of the invocation.
func IsUsage(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Usage()
}
