package shim

import (
	"context"
	"fmt"

	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	godigest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/grpc"

	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Which manifest a container restores from. containerd's CRI gives a
// container the image ID the kubelet pulled (its config's digest) and
// records, as the container's image, whichever reference of that ID sorts
// first: tags before digests, so another tenant's tag of the same config
// wins over a pod's digest. The manifest the pod named is in the spec:
// containerd 2.x's CRI sets AnnCRIImageName to the image the pod spec
// names (the kubelet's UserSpecifiedImage), after the pod's annotations,
// so a pod cannot set it. containerd 1.7's CRI sets it to the same first
// reference as the record; there, the config's parts label (ociimage's
// runnable_bind.go) is what makes every manifest of one config carry the
// same checkpoint. Without CRI (a `ctr run`), the record names the one
// image the user named.

// AnnCRIImageName is where containerd's CRI puts the container's image.
const AnnCRIImageName = "io.kubernetes.cri.image-name"

// ErrImageMismatch: the manifest the pod named is not the image the
// container was made from.
var ErrImageMismatch = report.Sentinel("the image the pod names is not the image the container was made from", errdefs.ErrFailedPrecondition)

// containerRecord is what containerd's container record says of the image.
type containerRecord struct {
	image       string // the record's image name
	snapshotter string
	snapshotKey string
	userns      bool // the spec maps user IDs: the snapshot may be a remapped copy
}

// resolveNamed normalizes the name the pod gave as CRI's PullImage does
// and returns the image record name and, for a digest-pinned name, the
// pinned digest.
func resolveNamed(name string) (string, godigest.Digest, error) {
	ref, err := reference.ParseDockerRef(name)
	if err != nil {
		return "", "", fmt.Errorf("the container's image name %q: %w", name, err)
	}
	if d, ok := ref.(reference.Digested); ok {
		return ref.String(), d.Digest(), nil
	}
	return ref.String(), "", nil
}

// readImage reads image record name and its manifest for this platform
// (an index resolves to the platform's manifest).
func readImage(ctx context.Context, conn grpc.ClientConnInterface, ri *runnableImage, name string) (ocispec.Descriptor, ocispec.Manifest, error) {
	im, err := imagesapi.NewImagesClient(conn).Get(ctx, &imagesapi.GetImageRequest{Name: name})
	if err != nil {
		return ocispec.Descriptor{}, ocispec.Manifest{}, fmt.Errorf("read image %s: %w", name, err)
	}
	desc := ocispec.Descriptor{MediaType: im.Image.Target.MediaType, Digest: godigest.Digest(im.Image.Target.Digest), Size: im.Image.Target.Size}
	man, err := images.Manifest(ctx, ri.cs, desc, platforms.Default())
	if err != nil {
		return desc, man, fmt.Errorf("read the manifest of %s: %w", name, err)
	}
	return desc, man, nil
}

// checkBinding checks, before anything of the checkpoint is read, that the
// manifest ri names is the image the container was made from: a pinned
// name's record points at the pinned digest, the manifest's config is the
// record's image's config, and the container's snapshot was made from
// that config's layers. The parts themselves are checked against the
// config in ociimage.UnpackParts.
func (s *service) checkBinding(ctx context.Context, ri runnableImage, who string) error {
	err := s.bindingErr(ctx, ri)
	if err == nil {
		return nil
	}
	return &report.StepError{Op: "restore", ID: who, Step: "match the checkpoint image " + ri.name + " to the container", Err: err,
		Outcome: "nothing was restored",
		Remedy:  "pull the image the pod names again (remove the node's copy and its other names first) and recreate the pod"}
}

func (s *service) bindingErr(ctx context.Context, ri runnableImage) error {
	if ri.pinned != "" && ri.desc.Digest != ri.pinned {
		return fmt.Errorf("%w: %s points at %s on this node", ErrImageMismatch, ri.name, ri.desc.Digest)
	}
	if ri.recordConfig != "" && ri.man.Config.Digest != ri.recordConfig {
		return fmt.Errorf("%w: %s has config %s, the container's image has %s", ErrImageMismatch,
			ri.name, ri.man.Config.Digest, ri.recordConfig)
	}
	if ri.rec.snapshotKey == "" {
		return nil
	}
	conn, err := s.daemon.connection(ctx)
	if err != nil {
		return err
	}
	ctx, cancel, err := daemonContext(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	cfg, err := ociimage.ReadConfig(ctx, ri.cs, ri.man)
	if err != nil {
		return err
	}
	return snapshotOf(ctx, snapshotsapi.NewSnapshotsClient(conn), ri, identity.ChainID(cfg.RootFS.DiffIDs).String())
}

// snapshotOf checks that the container's snapshot was made from the
// layers of chain ID chain: its parent is chain, or, for a pod with its
// own user namespace on a snapshotter without idmapped mounts, a remapped
// copy (containerd's withRemappedSnapshotBase) whose parent is chain.
func snapshotOf(ctx context.Context, sc snapshotsapi.SnapshotsClient, ri runnableImage, chain string) error {
	parent, levels := ri.rec.snapshotKey, 1
	if ri.rec.userns {
		levels = 2
	}
	for range levels {
		st, err := sc.Stat(ctx, &snapshotsapi.StatSnapshotRequest{Snapshotter: ri.rec.snapshotter, Key: parent})
		if err != nil {
			return fmt.Errorf("read the container's snapshot %s: %w", parent, err)
		}
		if parent = st.Info.Parent; parent == chain {
			return nil
		}
		if parent == "" {
			break
		}
	}
	return fmt.Errorf("%w: the container's root file system was not made from %s's layers (%s)", ErrImageMismatch, ri.name, chain)
}

// namedImage fills ri with the manifest the pod named (AnnCRIImageName),
// and the config of the container record's image to compare it with.
func namedImage(ctx context.Context, conn grpc.ClientConnInterface, ri *runnableImage, named string) error {
	recDesc, recMan, err := readImage(ctx, conn, ri, ri.rec.image)
	if err != nil {
		return err
	}
	ri.recordConfig = recMan.Config.Digest
	if id, err := godigest.Parse(named); err == nil {
		// An image ID (a client that named the config): the record's
		// manifest, which checkBinding holds to that config.
		ri.desc, ri.man, ri.recordConfig = recDesc, recMan, id
		return nil
	}
	name, pinned, err := resolveNamed(named)
	if err != nil {
		return err
	}
	ri.name, ri.pinned = name, pinned
	ri.desc, ri.man, err = readImage(ctx, conn, ri, name)
	return err
}
