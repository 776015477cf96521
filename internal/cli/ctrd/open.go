package ctrd

import (
	"bufio"
	"context"
	"fmt"
	"io"

	ctrdcontent "github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Open reads the checkpoint image ref (made by `ctr task checkpoint` or
// `ctr container checkpoint --task`) from a containerd namespace and lays
// it out under tmp as an export directory (ociimage.OpenContainerdIndex).
// The container record, when it still exists, supplies the runtime and
// snapshotter that a task checkpoint does not record.
func Open(ctx context.Context, o Options, ref, tmp string) (*ociimage.Source, error) {
	c, ctx, err := o.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	img, err := c.ImageService().Get(ctx, ref)
	if errdefs.IsNotFound(err) {
		return nil, report.WithRemedy(fmt.Errorf("%s is not an image in containerd namespace %q at %s: %w", ref, o.Namespace, o.Address, ociimage.ErrUnknownSource), fmt.Sprintf("give the name that `ctr task checkpoint` printed (ctr -n %s image ls), and --namespace", o.Namespace))
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s from containerd: %w", ref, err)
	}
	meta := ociimage.ContainerdMeta{Namespace: o.Namespace}
	if rec, err := c.ContainerService().Get(ctx, ociimage.CheckpointContainerID(ref)); err == nil {
		meta.ID, meta.OCIRuntime, meta.Snapshotter = rec.ID, rec.Runtime.Name, rec.Snapshotter
		meta.RootfsImageName, meta.CreatedTime = rec.Image, rec.CreatedAt.UTC()
	}
	cs, blobs := c.ContentStore(), contentBlobs(ctx, c)
	open := func(ctx context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
		ra, err := cs.ReaderAt(ctx, d) // the namespace must hold it
		if err != nil {
			return nil, err
		}
		if f := openLocalBlob(blobs, d); f != nil {
			ra.Close()
			return f, nil
		}
		return readCloser{bufio.NewReaderSize(ctrdcontent.NewReader(ra), blobReadSize), ra}, nil
	}
	return ociimage.OpenContainerdIndex(ctx, ref, img.Target, open, meta, tmp)
}

// blobReadSize is how much one read of a blob asks containerd for. Each
// read of its content store's client is a gRPC stream of its own: read
// through the 32 KiB buffers of a tar reader, a checkpoint of 2 GiB took
// 65,536 streams and most of the time of `cryo image build --containerd`.
const blobReadSize = 4 << 20

type readCloser struct {
	io.Reader
	io.Closer
}
