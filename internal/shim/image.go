package shim

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/bundle"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// A container whose spec names a checkpoint image is restored from it, on
// every containerd, without containerd's own CRI restore, when the node's
// policy allows it (imagerestore.Authorize: the path is off by default,
// and then open only to digest-pinned images of the repositories allowed
// to the pod's namespace): Create prepares the image (pull or local store,
// checked against its digest, verified unpack into a private work
// directory), points the request's checkpoint at it and runs the checks
// of every restore; after the runc service has mounted the rootfs, the
// image's rootfs diff is applied; Start restores as for any checkpoint,
// and the work directory goes when Start returns or the task is deleted.

// imageRequest reads the restore request from the bundle's spec.
func imageRequest(bundle string) (imagerestore.Request, bool, error) {
	spec, err := readBundleSpec(bundle)
	if err != nil {
		return imagerestore.Request{}, false, nil // the runc service reports an unreadable spec
	}
	return imagerestore.FromAnnotations(spec.Annotations)
}

// readBundleSpec is the spec of the bundle (see bundle.Read).
func readBundleSpec(dir string) (*specs.Spec, error) { return bundle.Read(dir) }

// createFromImage restores the task from the checkpoint image req names.
// A failure before the runc service has created the task follows the
// request's policy: fail, or start fresh with a warning. A failure to
// apply the rootfs diff always fails, since the rootfs may be half changed.
func (s *service) createFromImage(ctx context.Context, r *taskv3.CreateTaskRequest, req imagerestore.Request, reqErr error) (*taskv3.CreateTaskResponse, error) {
	started := time.Now()
	// The restore's deadline bounds the preparation; a fresh start
	// after a refusal, and the runc service's create, are not the
	// restore's.
	rctx, cancel := s.withRestoreDeadline(ctx, r.Bundle, started)
	defer cancel()
	pending, err := s.checkImageRestore(rctx, r, req, reqErr)
	if err != nil {
		return s.imageRestoreRefused(ctx, r, req, err)
	}
	return s.createChecked(ctx, r, pending, started, func() error {
		if err := s.applyRootfs(rctx, r, req, pending.work); err != nil {
			log.G(ctx).WithError(err).Error("cryo: restore from image failed")
			return toGRPC(err, true)
		}
		return nil
	})
}

// checkImageRestore prepares the image and checks the restore; on failure
// nothing is left behind and r is unchanged.
func (s *service) checkImageRestore(ctx context.Context, r *taskv3.CreateTaskRequest, req imagerestore.Request, reqErr error) (pendingRestore, error) {
	who := containerLabel(r.ID, req.Container)
	if reqErr != nil {
		return pendingRestore{}, &report.StepError{Op: "restore", ID: who, Step: "read the checkpoint annotations", Err: reqErr,
			Outcome: "nothing was restored", Remedy: "fix the pod's " + imagerestore.Prefix + "* annotations (see docs/kubernetes.md)"}
	}
	began := time.Now()
	if run := createRunOf(ctx); run != nil {
		s.atStep(run, "prepare the checkpoint image")
	}
	work, err := imagerestore.Prepare(ctx, req, who, imagerestore.OptionsFrom(s.cfg))
	if err != nil {
		return pendingRestore{}, prepareCutOff(ctx, who, err)
	}
	// The digest is what was restored, whatever the annotation's text.
	log.G(ctx).WithFields(log.Fields{"id": r.ID, "image": work.Ref, "digest": work.Digest, "namespace": work.Source.Namespace,
		"node_credentials": work.Source.NodeCredentials, "plain_http": work.Source.Remote.PlainHTTP, "kind": string(work.Kind),
		"pulled": work.Pulled, "elapsed_ms": time.Since(began).Milliseconds()}).Info("cryo: checkpoint image unpacked and verified")
	return s.checkPrepared(ctx, r, work)
}

// checkPrepared runs the checks of every restore on a checkpoint unpacked
// into a work directory; on failure the work directory goes and r is
// unchanged.
func (s *service) checkPrepared(ctx context.Context, r *taskv3.CreateTaskRequest, work *imagerestore.Prepared) (pendingRestore, error) {
	r.Checkpoint = work.CRIUDir()
	pending, err := s.checkRestore(ctx, r)
	if err != nil {
		r.Checkpoint = ""
		removeWork(ctx, r.ID, work)
		return pendingRestore{}, err
	}
	pending.work = work
	pending.deadline, _ = orchestrate.RestoreDeadline(ctx)
	return pending, nil
}

// imageRestoreRefused fails the Create with the reason, or, when the
// policy says fresh, logs the reason and starts the task from its image.
func (s *service) imageRestoreRefused(ctx context.Context, r *taskv3.CreateTaskRequest, req imagerestore.Request, err error) (*taskv3.CreateTaskResponse, error) {
	// A Create given up is not started fresh: nobody would start or
	// delete the task.
	if req.OnFailure != imagerestore.PolicyFresh || s.cutCause(ctx, createRunOf(ctx)) != nil {
		log.G(ctx).WithError(err).WithFields(log.Fields{"id": r.ID, "image": req.Ref, "namespace": req.Namespace}).Error("cryo: restore from image refused")
		return nil, toGRPC(err, true)
	}
	log.G(ctx).WithError(err).WithFields(log.Fields{"id": r.ID, "image": req.Ref, "namespace": req.Namespace}).
		Warn("cryo: restore from image refused; starting the container fresh (" + imagerestore.AnnOnFailure + "=fresh)")
	if createRunOf(ctx) != nil {
		// The fresh task is the Create's answer, not a restore's.
		s.endCreateRun(createRunOf(ctx))
	}
	return s.createFresh(ctx, r)
}

// applyRootfs applies the image's rootfs diff to the rootfs the runc
// service has mounted for the new task.
func (s *service) applyRootfs(ctx context.Context, r *taskv3.CreateTaskRequest, req imagerestore.Request, work *imagerestore.Prepared) error {
	rootfs, err := bundleRootfs(r.Bundle)
	if err == nil {
		var n int64
		n, err = work.ApplyRootfs(ctx, rootfs)
		log.G(ctx).WithFields(log.Fields{"id": r.ID, "rootfs": rootfs, "bytes": n}).Debug("cryo: rootfs diff applied")
	}
	if err != nil {
		remedy := "check that the container's image is the one the checkpoint was taken from"
		if orchestrate.PastDeadline(ctx, err) {
			err = orchestrate.DeadlineExceededIn("rootfs diff's application", orchestrate.RestoreLimit(ctx, 0), err)
			remedy = orchestrate.RestoreDeadlineRemedy
		}
		return &report.StepError{Op: "restore", ID: containerLabel(r.ID, req.Container), Step: "apply the rootfs diff of " + req.Ref, Err: err,
			Outcome: "nothing was restored, the container was not created", Remedy: remedy}
	}
	return nil
}

// bundleRootfs is where the spec's root is: relative paths are the bundle's.
func bundleRootfs(bundle string) (string, error) {
	spec, err := readBundleSpec(bundle)
	if err != nil {
		return "", fmt.Errorf("read the container's spec: %w", err)
	}
	if spec.Root == nil || spec.Root.Path == "" {
		return "", fmt.Errorf("the container's spec has no root path")
	}
	if filepath.IsAbs(spec.Root.Path) {
		return spec.Root.Path, nil
	}
	return filepath.Join(bundle, spec.Root.Path), nil
}

// deleteCreated undoes the runc service's Create: the container, its
// mounts and its state go.
func (s *service) deleteCreated(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	if _, err := s.TTRPCTaskService.Delete(ctx, &taskv3.DeleteRequest{ID: id}); err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: could not delete the task of a refused restore")
	}
}

// removeWork removes a restore's work directory, if it had one.
func removeWork(ctx context.Context, id string, work *imagerestore.Prepared) {
	if err := work.Remove(); err != nil {
		log.G(ctx).WithError(err).WithFields(log.Fields{"id": id, "dir": work.Dir}).
			Warn("cryo: could not remove the restore's work directory, which holds the checkpoint's memory; remove it by hand")
	}
}

// containerLabel names a container in messages: its Kubernetes name when
// the CRI gave one, with its id.
func containerLabel(id, name string) string {
	if name == "" {
		return id
	}
	short := id
	if len(short) > 12 {
		short = short[:12]
	}
	return fmt.Sprintf("container %s (%s)", name, short)
}
