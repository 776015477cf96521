package orchestrate

import (
	"context"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// finishCheckpoint is one FinishCheckpoint.
func finishCheckpoint(ctx context.Context, e env, dir string) (*manifest.Manifest, error) {
	id := "checkpoint " + dir
	_, release, err := e.locks.hold(nil, "checkpoint", id)
	if err != nil {
		return nil, e.locks.refused("checkpoint", id, err)
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
	_, err = e.stepper.take(ctx, id, StepComplete, func(context.Context) error { return manifest.Complete(dir, m, digest.RecordsFrom(e.cfg)) })
	if err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: id, Step: StepComplete, Err: err, Outcome: "the checkpoint is still unfinished",
			Remedy: "free space in " + dir + " or make it writable and retry; if CRIU's dump did not complete, re-take the checkpoint"}
	}
	return m, nil
}
