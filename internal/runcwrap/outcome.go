package runcwrap

import (
	"cmp"
	"fmt"
	"os"

	"github.com/cryo-gpu/cryo/internal/confine/outcome"
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// armOutcome makes CRIU check the restored tasks against the bundle's spec
// before any of them runs (package outcome), for this restore; nil when
// it cannot, and the restore is refused: the check is the authority.
func (w *wrapper) armOutcome(o crOpts) *outcome.Armed {
	self, err := os.Executable()
	if err == nil {
		var a outcome.Armed
		if a, err = outcome.Arm(absPath(o.bundle, "."), o.id, self); err == nil {
			return &a
		}
	}
	w.log.error("%v", &report.StepError{Op: "restore", ID: o.id, Step: outcome.StepName, Err: err,
		Outcome: "nothing was restored", Remedy: "let cryo add its action script to the bundle's CRIU configuration"})
	return nil
}

// disarm takes the check out of the bundle's CRIU configuration again.
func (w *wrapper) disarm(o crOpts, a *outcome.Armed) {
	if err := a.Disarm(); err != nil {
		w.log.warn("restore of container %s: the outcome check stays in the CRIU configuration: %v", o.id, err)
	}
}

// outcomeErr is the check's refusal when the check killed the restored
// tasks of a failed runc restore (runc says only that CRIU went away),
// else err.
func outcomeErr(o crOpts, err error) error {
	v, ok := outcome.ReadVerdict(absPath(o.bundle, "."))
	switch {
	case !ok || v.Passed:
		return err
	case err == nil:
		return v.Err()
	}
	return fmt.Errorf("%w; runc restore failed as it should: %w", v.Err(), err)
}

// outcomeRemedy is a failed restore's remedy.
func outcomeRemedy(err error) string {
	return outcome.RemedyFor(err, cmp.Or(criu.RemedyOf(err), "read CRIU's log from its first Error line; the checkpoint itself was not changed"))
}

// outcomeStep records the check's duration in the restore's steps.
func outcomeStep(o crOpts, m *manifest.Manifest) {
	if v, ok := outcome.ReadVerdict(absPath(o.bundle, ".")); ok && v.Passed && m != nil {
		m.RestoreSteps = append(m.RestoreSteps, manifest.Step{Name: outcome.StepName, Seconds: v.Seconds})
	}
}

// logRefusal reports a foreground restore whose tasks the check killed
// (runc reported only that CRIU went away); false if it did not.
func (w *wrapper) logRefusal(o crOpts, result string) bool {
	err := outcomeErr(o, nil)
	if err != nil {
		w.log.error("%v", &report.StepError{Op: "restore", ID: o.id, Step: outcome.StepName, Err: err, Outcome: result, Remedy: outcome.Remedy})
	}
	return err != nil
}
