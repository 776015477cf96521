package shim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/log"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// A restore from an image has one deadline, from the start of the shim's
// Create to the end of its Start: reading the checkpoint (a pull, or the
// parts from containerd's content store), the unpack and its
// verification, CRIU and the CUDA resume. A pod's container gets
// config.DefaultKubernetesRestoreTime unless CRYO_RESTORE_TIMEOUT says
// otherwise: containerd's CRI runs Create and Start inside one
// StartContainer, which the kubelet gives up on after its
// --runtime-request-timeout (2 minutes by default), and cryo ends first,
// with its own error and nothing left (docs/kubernetes.md).

// restoreDeadline is the whole restore's deadline for a container of spec
// annotations ann whose Create began at since.
func (s *service) restoreDeadline(ann map[string]string, since time.Time) orchestrate.Deadline {
	_, cri := ann[imagerestore.AnnCRIContainerType]
	return orchestrate.Deadline{Since: since, Limit: s.cfg.RestoreLimit(cri)}
}

// withRestoreDeadline bounds ctx by the restore's deadline of the
// container whose bundle is bundle.
func (s *service) withRestoreDeadline(ctx context.Context, bundle string, since time.Time) (context.Context, context.CancelFunc) {
	var ann map[string]string
	if spec, err := readBundleSpec(bundle); err == nil {
		ann = spec.Annotations
	}
	return orchestrate.WithRestoreDeadline(ctx, s.restoreDeadline(ann, since))
}

// startDeadline bounds Start's ctx by the deadline Create began, for a
// restore from an image; other restores keep CRIU's own bound.
func startDeadline(ctx context.Context, pending pendingRestore) (context.Context, context.CancelFunc) {
	if pending.deadline.Limit <= 0 {
		return context.WithCancel(ctx)
	}
	return orchestrate.WithRestoreDeadline(ctx, pending.deadline)
}

// readParts reads the runnable image's checkpoint parts from containerd's
// content store into dir, bounded by the node's unpack limits and by the
// restore's deadline (else by a minute, as every call to containerd).
func (s *service) readParts(ctx context.Context, ri runnableImage, dir string, stats *ociimage.PartsStats) error {
	dctx, cancel, err := daemonContext(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if d, ok := orchestrate.RestoreDeadline(ctx); ok {
		var cancelDeadline context.CancelFunc
		dctx, cancelDeadline = orchestrate.WithRestoreDeadline(context.WithoutCancel(dctx), d)
		defer cancelDeadline()
	}
	o := ociimage.PartsOptions{Limits: ociimage.LimitsFrom(s.cfg), BlobDir: s.contentBlobs(ctx), Stats: stats}
	return ociimage.UnpackPartsFrom(dctx, ri.cs, ri.man, dir, digest.RecordsFrom(s.cfg), o)
}

// contentBlobs is containerd's content store's blobs directory on this
// node, from which the restore hard-links the pages blobs (no second copy
// of the memory); "" when containerd's root is unknown: they are copied.
func (s *service) contentBlobs(ctx context.Context) string {
	root, err := s.daemon.root(ctx)
	if err != nil {
		log.G(ctx).WithError(err).Warn("cryo: containerd's root is unknown: the checkpoint's pages are copied, not linked")
		return ""
	}
	return filepath.Join(root, "io.containerd.content.v1.content", "blobs")
}

// unpackCutOff is the error of a restore whose deadline passed, or whose
// unpack limits refused the image, while its checkpoint was read: the
// work directory is removed first, and the outcome says whether it went.
// Any other error gives nil.
func unpackCutOff(ctx context.Context, who, step string, work *imagerestore.Prepared, err error) error {
	deadline := orchestrate.PastDeadline(ctx, err)
	if !deadline && !errors.Is(err, ociimage.ErrUnpackLimit) {
		return nil
	}
	outcome := "nothing was restored" + removedOutcome(work)
	if !deadline {
		return &report.StepError{Op: "restore", ID: who, Step: step, Err: err, Outcome: outcome}
	}
	return &report.StepError{Op: "restore", ID: who, Step: step, Outcome: outcome, Remedy: orchestrate.RestoreDeadlineRemedy,
		Err: orchestrate.DeadlineExceededIn("unpack of the checkpoint", orchestrate.RestoreLimit(ctx, 0), err)}
}

// removedOutcome removes the work directory and says what became of it,
// as checked.
func removedOutcome(work *imagerestore.Prepared) string {
	if work == nil || work.Dir == "" {
		return ""
	}
	if err := work.Remove(); err != nil {
		return "; the work directory " + work.Dir + " could not be removed (" + err.Error() + "): remove it by hand, it holds the checkpoint's memory"
	}
	if _, err := os.Lstat(work.Dir); err == nil {
		return "; the work directory " + work.Dir + " is left: remove it by hand"
	}
	return "; its work directory was removed, nothing of the unpack is left"
}

// prepareCutOff words a pull or unpack of an annotation's image that the
// restore's deadline cut off; imagerestore has removed what it unpacked.
// Other errors are returned as they are.
func prepareCutOff(ctx context.Context, who string, err error) error {
	if !orchestrate.PastDeadline(ctx, err) {
		return err
	}
	outcome := "nothing was restored; nothing of the unpack is left"
	if errors.Is(err, imagerestore.ErrWorkDirLeft) {
		outcome = "nothing was restored; the work directory of the unpack is left: remove it by hand"
	}
	// The deadline replaces the cause of the step's report (the step is
	// kept): a report nested in another one of the same restore would
	// show the inner cause alone.
	cut := &report.StepError{Op: "restore", ID: who, Step: "prepare the checkpoint image"}
	var se *report.StepError
	if errors.As(err, &se) && se.Op == cut.Op && se.ID == who {
		cut.Step, err = se.Step, se.Err
	}
	cut.Err = orchestrate.DeadlineExceededIn("fetch and unpack of the checkpoint", orchestrate.RestoreLimit(ctx, 0), err)
	cut.Outcome, cut.Remedy = outcome, orchestrate.RestoreDeadlineRemedy
	return cut
}
