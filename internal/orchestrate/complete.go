package orchestrate

import (
	"context"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// interruptedAfterDump says whether, before a restore verifies it, the
// checkpoint in dir must be completed: its run stopped after CRIU's dump
// had completed (cryo killed while it hashed, a full disk at its last
// write, cryo-runc killed under Podman), so the processes may be gone and
// the images are whole, and refusing it would lose the workload for good.
// m and err are what reading its manifest gave, read once by the restore's
// check (restoreCheck.read). It warns of the completion to come. Anything
// else (no manifest, digests already there, a partial dump) is left for
// verify to judge.
func (o *Orchestrator) interruptedAfterDump(id, dir string, m *manifest.Manifest, err error) bool {
	if err != nil || !m.Unfinished() {
		return false
	}
	if ok, err := manifest.DumpCompleted(dir, m); err != nil || !ok {
		return false
	}
	o.log().Warn("checkpoint interrupted after CRIU's dump completed: completing it now; its files are hashed as they are now, not as CRIU wrote them", "id", id, "dir", dir)
	return true
}

// complete is the step that hashes an interrupted checkpoint's files and
// writes its finished manifest, for `cryo checkpoint --finish` (a restore
// takes it as a step of its check, restoreCheck.table).
func (o *Orchestrator) complete(ctx context.Context, id, dir string, m *manifest.Manifest) error {
	_, err := o.step(ctx, id, StepComplete, func(context.Context) error { return manifest.Complete(dir, m, digest.RecordsFrom(o.Config)) })
	return err
}

// FinishCheckpoint completes the checkpoint in dir whose run was
// interrupted after CRIU's dump (see interruptedAfterDump), under the
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
	if err := o.complete(ctx, id, dir, m); err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: id, Step: StepComplete, Err: err, Outcome: "the checkpoint is still unfinished",
			Remedy: "free space in " + dir + " or make it writable and retry; if CRIU's dump did not complete, re-take the checkpoint"}
	}
	return m, nil
}
