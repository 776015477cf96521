package ociimage

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/client"
	ctrdcontent "github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ContainerdOptions says which containerd to talk to.
type ContainerdOptions struct {
	Address   string // the daemon's socket
	Namespace string
}

// dial connects to containerd and returns a context in its namespace.
func (o ContainerdOptions) dial(ctx context.Context) (*client.Client, context.Context, error) {
	c, err := client.New(o.Address, client.WithDefaultNamespace(o.Namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, ctx, fmt.Errorf("connect to containerd at %s: %w; remedy: pass --address with the daemon's socket (and run as root)", o.Address, err)
	}
	return c, namespaces.WithNamespace(ctx, o.Namespace), nil
}

// OpenContainerd reads the checkpoint image ref (made by `ctr task
// checkpoint` or `ctr container checkpoint --task`) from a containerd
// namespace and lays it out under tmp as an export directory (see
// layoutContainerd). The container record, when it still exists, supplies
// the runtime and snapshotter that a task checkpoint does not record.
func OpenContainerd(ctx context.Context, o ContainerdOptions, ref, tmp string) (*Source, error) {
	c, ctx, err := o.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	img, err := c.ImageService().Get(ctx, ref)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("%s is not an image in containerd namespace %q at %s; remedy: give the name that `ctr task checkpoint` printed (ctr -n %s image ls), and --namespace: %w", ref, o.Namespace, o.Address, o.Namespace, ErrUnknownSource)
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s from containerd: %w", ref, err)
	}
	cs := c.ContentStore()
	ck := &ctrdCheckpoint{ref: ref, meta: containerdMeta{Namespace: o.Namespace},
		open: func(ctx context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
			ra, err := cs.ReaderAt(ctx, d)
			if err != nil {
				return nil, err
			}
			return readCloser{ctrdcontent.NewReader(ra), ra}, nil
		}}
	if err := ck.decodeIndex(ctx, img.Target); err != nil {
		return nil, err
	}
	id := checkpointContainerID(ref)
	if rec, err := c.ContainerService().Get(ctx, id); err == nil {
		ck.meta.ID, ck.meta.Runtime, ck.meta.Snapshotter = rec.ID, rec.Runtime.Name, rec.Snapshotter
		ck.meta.RootfsImage = rec.Image
	}
	return openLaidOut(ctx, ck, tmp)
}

func openLaidOut(ctx context.Context, ck *ctrdCheckpoint, tmp string) (*Source, error) {
	dir, err := os.MkdirTemp(tmp, "cryo-containerd-")
	if err != nil {
		return nil, fmt.Errorf("lay out checkpoint %s: %w", ck.ref, err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := layoutContainerd(ctx, ck, dir); err != nil {
		cleanup()
		return nil, err
	}
	s, err := openExportDir(dir, cleanup)
	if err != nil {
		cleanup()
		return nil, err
	}
	return s, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// isOCILayout reports whether dir is an OCI image layout (`ctr image export`).
func isOCILayout(dir string) bool {
	_, e1 := os.Stat(filepath.Join(dir, ocispec.ImageLayoutFile))
	_, e2 := os.Stat(filepath.Join(dir, ocispec.ImageIndexFile))
	return e1 == nil && e2 == nil
}

// openLayoutCheckpoint opens a containerd checkpoint exported with
// `ctr image export`: the first index in index.json that lists CRIU images.
func openLayoutCheckpoint(ctx context.Context, dir, tmp string, cleanup func()) (*Source, error) {
	fail := func(err error) (*Source, error) {
		if cleanup != nil {
			cleanup()
		}
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, ocispec.ImageIndexFile))
	if err != nil {
		return fail(err)
	}
	var top ocispec.Index
	if err := json.Unmarshal(data, &top); err != nil {
		return fail(fmt.Errorf("%s/index.json: %w", dir, err))
	}
	open := func(_ context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
		if err := d.Digest.Validate(); err != nil {
			return nil, err
		}
		return os.Open(filepath.Join(dir, ocispec.ImageBlobsDir, d.Digest.Algorithm().String(), d.Digest.Encoded()))
	}
	for _, d := range top.Manifests {
		ref := firstNonEmpty(d.Annotations["io.containerd.image.name"], d.Annotations[ocispec.AnnotationRefName], d.Digest.String())
		ck := &ctrdCheckpoint{ref: ref, open: open}
		if ck.decodeIndex(ctx, d) != nil || !hasCRIUBlob(ck.index) {
			continue
		}
		s, err := openLaidOut(ctx, ck, tmp)
		if err != nil {
			return fail(err)
		}
		if cleanup != nil {
			inner := s.cleanup
			s.cleanup = func() { inner(); cleanup() }
		}
		return s, nil
	}
	return fail(fmt.Errorf("%s is an OCI image layout without a containerd checkpoint in it; remedy: export the checkpoint image (`ctr image export OUT.tar CHECKPOINT`): %w", dir, ErrUnknownSource))
}

func hasCRIUBlob(idx ocispec.Index) bool {
	for _, m := range idx.Manifests {
		if m.MediaType == images.MediaTypeContainerd1Checkpoint {
			return true
		}
	}
	return false
}
