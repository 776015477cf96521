package shim

import (
	"cmp"
	"context"
	"fmt"
	"os"

	"github.com/containerd/log"

	"github.com/cryo-gpu/cryo/internal/confine/outcome"
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// armOutcome makes CRIU check the restored tasks against the bundle's
// spec before any of them runs (package outcome), for this restore only
// (see disarmOutcome). A restore that cannot be checked is refused: the
// check is the authority behind the checks before it.
func armOutcome(id, bundle string) (outcome.Armed, error) {
	self, err := os.Executable()
	if err == nil {
		var a outcome.Armed
		if a, err = outcome.Arm(bundle, id, self); err == nil {
			return a, nil
		}
	}
	return outcome.Armed{}, &report.StepError{Op: "restore", ID: id, Step: outcome.StepName, Err: err,
		Outcome: "nothing was restored", Remedy: "let cryo add its action script to the bundle's CRIU configuration"}
}

// disarmOutcome takes the check out of the bundle's CRIU configuration:
// the container's later checkpoints need not run it.
func disarmOutcome(ctx context.Context, id string, a outcome.Armed) {
	if err := a.Disarm(); err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: the outcome check stays in the CRIU configuration")
	}
}

// outcomeErr is the check's refusal when it killed the restored tasks of
// a failed runc restore (runc says only that CRIU went away), else err.
func outcomeErr(bundle string, err error) error {
	if v, ok := outcome.ReadVerdict(bundle); ok && !v.Passed {
		return fmt.Errorf("%w; runc restore failed as it should: %w", v.Err(), err)
	}
	return orchestrate.RuncCRIUError("restore", err)
}

// outcomeStep records the check's duration in the restore's steps.
func outcomeStep(bundle string, m *manifest.Manifest) {
	if v, ok := outcome.ReadVerdict(bundle); ok && v.Passed && m != nil {
		m.RestoreSteps = append(m.RestoreSteps, manifest.Step{Name: outcome.StepName, Seconds: v.Seconds})
	}
}

// outcomeRemedy is a failed restore's remedy.
func outcomeRemedy(err error) string {
	return outcome.RemedyFor(err, cmp.Or(criu.RemedyOf(err), "read CRIU's log from its first Error line; the checkpoint itself was not changed"))
}
