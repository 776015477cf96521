package ociimage

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/core/images"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/report"
)

// BlobOpener opens one blob of a containerd checkpoint: from the daemon's
// content store (package ctrd) or from an OCI image layout.
type BlobOpener func(context.Context, ocispec.Descriptor) (io.ReadCloser, error)

// OpenContainerdIndex lays out the containerd checkpoint index top, named
// ref, whose blobs open reads, under tmp as an export directory (see
// layoutContainerd). meta holds what the caller knows beyond the index (the
// namespace, and the container record's runtime and snapshotter); the
// index's annotations fill the rest. The blob source stays the caller's:
// this package reads formats and talks to no daemon.
func OpenContainerdIndex(ctx context.Context, ref string, top ocispec.Descriptor, open BlobOpener, meta ContainerdMeta, tmp string) (*Source, error) {
	ck := &ctrdCheckpoint{ref: ref, open: open, meta: meta}
	if err := ck.decodeIndex(ctx, top); err != nil {
		return nil, err
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
	s.sums = ck.sums
	return s, nil
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
		ref := cmp.Or(d.Annotations["io.containerd.image.name"], d.Annotations[ocispec.AnnotationRefName], d.Digest.String())
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
	return fail(report.WithRemedy(fmt.Errorf("%s is an OCI image layout without a containerd checkpoint in it: %w", dir, ErrUnknownSource), "export the checkpoint image (`ctr image export OUT.tar CHECKPOINT`)"))
}

func hasCRIUBlob(idx ocispec.Index) bool {
	for _, m := range idx.Manifests {
		if m.MediaType == images.MediaTypeContainerd1Checkpoint {
			return true
		}
	}
	return false
}
