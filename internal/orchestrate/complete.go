package orchestrate

import (
	"context"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// FinishCheckpoint completes the checkpoint in dir whose run was
// interrupted after CRIU's dump (see restoreCheck.interruptedAfterDump), under the
// directory's lock. It fails with manifest.ErrIncomplete when the dump
// itself did not complete, and says so when there was nothing to finish.
func (o *Orchestrator) FinishCheckpoint(ctx context.Context, dir string) (*manifest.Manifest, error) {
	id := "checkpoint " + dir
	_, release, err := o.lockFor(nil, "checkpoint", id)
	if err != nil {
		return nil, o.lockError("checkpoint", id, err)
	}
	defer release()
	m, err := manifest.Read(dir)
	if err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: id, Step: StepComplete, Err: err, Outcome: "nothing was changed", Remedy: restoreRemedy(err, dir)}
	}
	if !m.Unfinished() {
		return m, fmt.Errorf("%s: the checkpoint already finished (its manifest has digests); nothing to do: %w", dir, ErrNothingToFinish)
	}
	// The step that a restore's check takes too (restoreCheck.table).
	_, err = o.step(ctx, id, StepComplete, func(context.Context) error { return manifest.Complete(dir, m, digest.RecordsFrom(o.Config)) })
	if err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: id, Step: StepComplete, Err: err, Outcome: "the checkpoint is still unfinished",
			Remedy: "free space in " + dir + " or make it writable and retry; if CRIU's dump did not complete, re-take the checkpoint"}
	}
	return m, nil
}
