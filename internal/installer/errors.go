package installer

import (
	"errors"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Error is a failed step of an install or uninstall: the step, the host
// path or command it was about, the cause and the one remedy.
type Error struct {
	Step   string // "copy", "containerd config", "restart", "doctor", "record", "revert", "label", "api"
	Target string // a host path or a command
	Err    error
	Remedy string
}

func (e *Error) Error() string {
	return report.Render("node "+e.Step+" "+e.Target+": "+e.Err.Error(), e.Remedy)
}

func (e *Error) Unwrap() error { return e.Err }

var (
	// ErrDoctor: the installed cryo's doctor reported a failed check.
	ErrDoctor = errors.New("cryo doctor failed")
	// ErrConfig: containerd's configuration cannot take cryo's drop-in.
	ErrConfig = errors.New("containerd configuration not understood")
)

func stepErr(step, target string, err error, remedy string) error {
	return &Error{Step: step, Target: target, Err: err, Remedy: remedy}
}
