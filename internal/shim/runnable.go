package shim

import (
	"context"
	"errors"
	"fmt"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	contentapi "github.com/containerd/containerd/api/services/content/v1"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/content/proxy"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/log"
	godigest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc/metadata"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// A container created from a runnable checkpoint image (see ociimage's
// runnable.go) is restored from it: the kubelet (or ctr) pulled the image
// with the pod's own credentials and containerd unpacked its layers, the
// application's image plus its changes, into the container's root file
// system. The checkpoint travels in the same manifest as blobs containerd
// fetched but did not unpack; the shim reads them from containerd's
// content store into a private work directory, removed once the restore
// has run. No pull of its own, no node credentials, and no copy of the
// image kept beside containerd's.

// AnnRestore is a pod (or container) annotation: "false" starts a
// container from a runnable checkpoint image fresh, as from any image.
const AnnRestore = imagerestore.Prefix + "restore"

// runnableImage is the image a container was created from, with its
// manifest and containerd's content store.
type runnableImage struct {
	name string
	desc ocispec.Descriptor // the image record's target (a manifest or an index)
	man  ocispec.Manifest
	cs   content.Store
	// Where the pod named the image (runnable_bind.go): the container
	// record, the digest the name pins, and the config of the record's
	// image (or the image ID the container names), which the named
	// manifest must have.
	rec          containerRecord
	pinned       godigest.Digest
	recordConfig godigest.Digest
}

// runnableCheckpoint reads the container's image from containerd and
// reports whether it is a runnable checkpoint image the container should
// restore from. What cannot be read is logged and the container starts
// fresh from its image, which is what a runnable image does wherever it
// is not restored; once the image is known to hold a checkpoint, every
// failure is the restore's and is reported.
func (s *service) runnableCheckpoint(ctx context.Context, r *taskv3.CreateTaskRequest) (runnableImage, bool) {
	spec, err := readBundleSpec(r.Bundle)
	if err != nil || spec.Annotations[imagerestore.AnnCRIContainerType] == "sandbox" {
		return runnableImage{}, false
	}
	if v := annotation(spec.Annotations, AnnRestore, spec.Annotations[imagerestore.AnnCRIContainerName]); v == "false" {
		return runnableImage{}, false
	}
	ri, err := s.containerImage(ctx, r.ID, spec.Annotations)
	ri.rec.userns = spec.Linux != nil && len(spec.Linux.UIDMappings) > 0
	if err != nil {
		log.G(ctx).WithError(err).WithField("id", r.ID).Warn("cryo: could not read the container's image from containerd; starting it from its image")
		return runnableImage{}, false
	}
	return ri, ri.name != "" && ociimage.IsRunnable(ri.man.Annotations)
}

// containerImage reads container id's image and manifest from containerd:
// the image the pod named, under CRI (ann holds CRI's annotations), else
// the container record's. A container without an image record gives the
// zero value.
func (s *service) containerImage(ctx context.Context, id string, ann map[string]string) (runnableImage, error) {
	conn, err := s.daemon.connection(ctx)
	if err != nil {
		return runnableImage{}, err
	}
	ctx, cancel, err := daemonContext(ctx)
	if err != nil {
		return runnableImage{}, err
	}
	defer cancel()
	c, err := containersapi.NewContainersClient(conn).Get(ctx, &containersapi.GetContainerRequest{ID: id})
	if err != nil {
		return runnableImage{}, fmt.Errorf("read container %s: %w", id, err)
	}
	if c.Container.Image == "" {
		return runnableImage{}, nil
	}
	ri := runnableImage{name: c.Container.Image, cs: proxy.NewContentStore(contentapi.NewContentClient(conn)),
		rec: containerRecord{image: c.Container.Image, snapshotter: c.Container.Snapshotter, snapshotKey: c.Container.SnapshotKey}}
	if named := ann[AnnCRIImageName]; named != "" {
		err = namedImage(ctx, conn, &ri, named)
	} else {
		ri.desc, ri.man, err = readImage(ctx, conn, &ri, ri.name)
	}
	if err != nil {
		return runnableImage{}, err
	}
	return ri, nil
}

// annotation is the container's own KEY.<name>, else KEY.
func annotation(ann map[string]string, key, container string) string {
	if v, ok := ann[key+"."+container]; ok && container != "" {
		return v
	}
	return ann[key]
}

// daemonContext is ctx with the task's namespace as containerd's gRPC
// API wants it, and a bound.
func daemonContext(ctx context.Context) (context.Context, context.CancelFunc, error) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.WithoutCancel(ctx), "containerd-namespace", ns), time.Minute)
	return ctx, cancel, nil
}

// createFromRunnable restores the task from the runnable image's
// checkpoint. A refusal before the runc service has created the task
// follows the pod's cryo.io/on-restore-failure policy.
func (s *service) createFromRunnable(ctx context.Context, r *taskv3.CreateTaskRequest, ri runnableImage) (*taskv3.CreateTaskResponse, error) {
	started := time.Now()
	spec, _ := readBundleSpec(r.Bundle)
	var ann map[string]string
	if spec != nil {
		ann = spec.Annotations
	}
	who := containerLabel(r.ID, ann[imagerestore.AnnCRIContainerName])
	rctx, cancel := orchestrate.WithRestoreDeadline(ctx, s.restoreDeadline(ann, started))
	defer cancel()
	pending, err := s.checkRunnable(rctx, r, ri, who)
	if err != nil {
		req, _, _ := imagerestore.FromAnnotations(ann)
		req.Ref = ri.name
		return s.imageRestoreRefused(ctx, r, req, err)
	}
	return s.createChecked(ctx, r, pending, started, nil)
}

// checkRunnable unpacks the checkpoint from containerd's content store
// and runs the checks of every restore; on failure nothing is left.
func (s *service) checkRunnable(ctx context.Context, r *taskv3.CreateTaskRequest, ri runnableImage, who string) (pendingRestore, error) {
	began := time.Now()
	if err := s.checkBinding(ctx, ri, who); err != nil {
		return pendingRestore{}, err
	}
	var stats ociimage.PartsStats
	if run := createRunOf(ctx); run != nil {
		s.atStep(run, "read the checkpoint of "+ri.name)
	}
	work, err := s.unpackRunnable(ctx, ri, who, &stats)
	if err != nil {
		return pendingRestore{}, err
	}
	log.G(ctx).WithFields(log.Fields{"id": r.ID, "image": ri.name, "digest": ri.desc.Digest.String(),
		"elapsed_ms": time.Since(began).Milliseconds(), "linked_bytes": stats.Linked, "copied_bytes": stats.Copied,
		"extracted_bytes": stats.Extracted}).Info("cryo: checkpoint read from containerd's content store")
	return s.checkPrepared(ctx, r, work)
}

func (s *service) unpackRunnable(ctx context.Context, ri runnableImage, who string, stats *ociimage.PartsStats) (*imagerestore.Prepared, error) {
	dir, err := imagerestore.NewWorkDir(s.cfg.RestoreDir)
	if err != nil {
		return nil, &report.StepError{Op: "restore", ID: who, Step: "make a work directory", Err: err, Outcome: "nothing was restored",
			Remedy: "check " + s.cfg.RestoreDir + " and its free space"}
	}
	work := &imagerestore.Prepared{Ref: ri.name, Kind: ociimage.Kind(ri.man.Annotations[ociimage.AnnKind]), Digest: ri.desc.Digest.String(), Dir: dir}
	if err = s.readParts(ctx, ri, dir, stats); err != nil {
		if cut := unpackCutOff(ctx, who, "read the checkpoint of "+ri.name, work, err); cut != nil {
			return nil, cut
		}
		work.Remove()
		remedy := "pull the image again (remove it from the node first), or rebuild it with `cryo image build --runnable`"
		switch {
		case errors.Is(err, ociimage.ErrNoSpace):
			remedy = "free space in " + s.cfg.RestoreDir
		case errors.Is(err, ociimage.ErrPartsMismatch), errors.Is(err, ociimage.ErrPartsUnbound):
			remedy = ociimage.RemedyParts
		}
		return nil, &report.StepError{Op: "restore", ID: who, Step: "read the checkpoint of " + ri.name, Err: err,
			Outcome: "nothing was restored", Remedy: remedy}
	}
	return work, nil
}
