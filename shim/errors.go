package shim

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"

	cryort "github.com/cryo-gpu/cryo/runtime"
)

// Sentinel errors of the shim; concrete errors are *StepError.
var (
	// ErrBusy: a checkpoint or restore of the same task is in flight; the
	// concrete error is a *runtime.BusyError naming it.
	ErrBusy = cryort.ErrBusy
	// ErrCheckpoint: the checkpoint failed; the task was returned to running.
	ErrCheckpoint = errors.New("checkpoint failed")
	// ErrRestore: the restore failed.
	ErrRestore = errors.New("restore failed")
)

// StepError names the container, the step that failed and what to do.
type StepError struct {
	Container string
	Step      string
	Remedy    string
	Err       error
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("cryo: container %s: %s: %v", e.Container, e.Step, e.Err)
	if e.Remedy != "" {
		msg += " (" + e.Remedy + ")"
	}
	return msg
}

func (e *StepError) Unwrap() error { return e.Err }

// toGRPC converts an error once, at the API edge. Errors that carry no
// errdefs class become FailedPrecondition for restore checks and Unknown
// otherwise, with the message intact.
func toGRPC(err error, precondition bool) error {
	if err == nil {
		return nil
	}
	if precondition && !errdefs.IsFailedPrecondition(err) {
		err = fmt.Errorf("%w: %w", errdefs.ErrFailedPrecondition, err)
	}
	return errgrpc.ToGRPC(err)
}
