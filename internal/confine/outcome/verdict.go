package outcome

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// VerdictFile is where the action script leaves its verdict, in the
// bundle: CRIU only logs a pre-resume script's failure, and runc reports
// only that CRIU went away, so the front end reads the reason here.
const VerdictFile = "cryo-outcome.json"

// StepName is the check's name in a restore's step timings.
const StepName = "verify restored"

// Verdict is one check's result.
type Verdict struct {
	Passed    bool       `json:"passed"`
	Violation *Violation `json:"violation,omitempty"`
	Error     string     `json:"error,omitempty"` // a check that could not read /proc
	Tasks     int        `json:"tasks"`
	Threads   int        `json:"threads"`
	Seconds   float64    `json:"seconds"`     // wall time, which the restore waits
	CPU       float64    `json:"cpu_seconds"` // of it, this process's CPU time (user and system)
	Killed    bool       `json:"killed"`      // the restored tree was killed
	// NoFilters: Error is an ErrNoFilters (the remedy is CRIU's).
	NoFilters bool `json:"no_filters,omitempty"`
}

// Err is the failed check's error: the *Violation (which wraps
// confine.ErrExceedsSpec), or why it could not vouch for the tasks.
func (v *Verdict) Err() error {
	switch {
	case v.Passed:
		return nil
	case v.Violation != nil:
		return fmt.Errorf("%w: %w", ErrRefused, v.Violation)
	case v.NoFilters:
		return fmt.Errorf("%w: %w", ErrRefused, noFilters(v.Error))
	default:
		return fmt.Errorf("%w: %s", ErrRefused, v.Error)
	}
}

// Remedy is what to do about a refused restore.
const Remedy = "restore the checkpoint into a container whose spec grants what the checkpointed container had, " +
	"or checkpoint the workload in a container with the new spec's rights"

// RemedyFor is a failed restore's remedy: Remedy when the check refused
// it, else otherwise.
func RemedyFor(err error, otherwise string) string {
	if errors.Is(err, ErrNoFilters) {
		return RemedyNoFilters
	}
	if errors.Is(err, ErrRefused) {
		return Remedy
	}
	return otherwise
}

// noFilters is an ErrNoFilters read back from a verdict.
type noFilters string

func (e noFilters) Error() string { return string(e) }
func (e noFilters) Unwrap() error { return ErrNoFilters }

// ErrRefused marks a restore whose restored tasks the check killed.
var ErrRefused = errors.New("the restored tasks were checked before they ran and killed")

// WriteVerdict writes v into the bundle.
func WriteVerdict(bundle string, v Verdict) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, VerdictFile), data, 0o600)
}

// ReadVerdict reads the bundle's verdict; false when the check did not run.
func ReadVerdict(bundle string) (*Verdict, bool) {
	data, err := os.ReadFile(filepath.Join(bundle, VerdictFile))
	if err != nil {
		return nil, false
	}
	var v Verdict
	if json.Unmarshal(data, &v) != nil {
		return nil, false
	}
	return &v, true
}
