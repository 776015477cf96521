package cli

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// withRestoreDeadline bounds the command's context, for the rest of the
// command, by one deadline for the whole restore of an image
// (CRYO_RESTORE_TIMEOUT): the pull, the unpack and its verification,
// CRIU and the CUDA resume.
func (ap *app) withRestoreDeadline(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx, cancel := orchestrate.WithRestoreDeadline(cmd.Context(), orchestrate.Deadline{Since: time.Now(), Limit: ap.cfg.RestoreLimit(false)})
	cmd.SetContext(ctx)
	return ctx, cancel
}

// cutOff words a fetch or an unpack of ref that the restore's deadline
// cut off, or that the unpack's caps refused, with what became of the
// work directory; any other error is stepCause(err). The store removes
// what it unpacked.
func cutOff(ctx context.Context, ref, stage string, err error) error {
	deadline := orchestrate.PastDeadline(ctx, err)
	if !deadline && !errors.Is(err, ociimage.ErrUnpackLimit) {
		return stepCause(err)
	}
	outcome := "nothing was restored; nothing of the unpack is left"
	if errors.Is(err, imagerestore.ErrWorkDirLeft) {
		outcome = "nothing was restored; the work directory of the unpack is left: remove it by hand"
	}
	if !deadline {
		return &report.StepError{Op: "restore", ID: ref, Step: stage, Outcome: outcome, Err: stepCause(err)}
	}
	return &report.StepError{Op: "restore", ID: ref, Step: stage, Outcome: outcome, Remedy: orchestrate.RestoreDeadlineRemedy,
		Err: orchestrate.DeadlineExceededIn(stage, orchestrate.RestoreLimit(ctx, 0), stepCause(err))}
}
