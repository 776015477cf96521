package ociimage

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	ctrdcontent "github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/progress"
)

// unpackRunnable lays a runnable image out as a checkpoint export: the
// checkpoint parts extracted, the changes' layer as rootfs-diff.tar (an
// OCI layer tar, which every restore path applies), and the base image's
// layers left alone: the restore's container already has them.
func (st *Store) unpackRunnable(ctx context.Context, im *Image, dir string, o UnpackOptions, budget *archive.Budget, t *progress.Task) error {
	if err := VerifyParts(im.Config, im.Manifest, true); err != nil {
		return err
	}
	fs := 0 // the index of the file-system layer, in the config's diff_ids
	for _, l := range im.Manifest.Layers {
		var err error
		switch {
		case l.MediaType == MediaTypeCheckpointPages:
			_, err = layPagesBlob(ctx, l, dir, filepath.Dir(st.blobDir()), st.blobFile(l), budget)
			t.Add(l.Size)
		case l.MediaType == MediaTypeCheckpointPart:
			err = st.unpackLayer(ctx, l, digest.Digest(l.Annotations[AnnPartDiffID]), dir, o, budget, t)
		case l.Annotations[AnnLayerPart] == PartRootfsLayer:
			err = st.writeRootfsDiff(l, im.Config.RootFS.DiffIDs[fs], dir, t)
			fs++
		default:
			fs++ // the application's image: the container has it already
		}
		if err != nil {
			return &LayerError{Digest: l.Digest.String(), Err: err}
		}
	}
	return nil
}

// fsLayers are the manifest's layers a runtime unpacks: all of them but a
// runnable image's checkpoint parts, which the config's diff_ids do not
// count.
func fsLayers(m ocispec.Manifest) []ocispec.Descriptor {
	var out []ocispec.Descriptor
	for _, l := range m.Layers {
		if !isCheckpointBlob(l) {
			out = append(out, l)
		}
	}
	return out
}

// writeRootfsDiff stores the changes' layer, uncompressed and verified, as
// the export's rootfs-diff.tar.
func (st *Store) writeRootfsDiff(l ocispec.Descriptor, diffID digest.Digest, dir string, t *progress.Task) error {
	tarStream, verify, closeFn, err := st.openLayer(l, nil, t)
	if err != nil {
		return err
	}
	defer closeFn()
	f, err := os.OpenFile(filepath.Join(dir, RootfsDiffName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", RootfsDiffName, err)
	}
	plain := newDigestCounter()
	_, err = io.Copy(io.MultiWriter(f, plain), tarStream)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return layerErr(l, err)
	}
	return finishLayer(l, diffID, tarStream, plain, verify)
}

// UnpackParts extracts the checkpoint parts of runnable image man from a
// content provider (containerd's content store, for the shim) into dir,
// each blob checked against its digest and uncompressed digest, then the
// CRIU files against cryo's manifest. Before anything is read, the
// manifest must be the one its config names (runnable_bind.go): containerd
// picks a manifest by config, and an image built before the label is
// refused. The base and changes' layers are not
// read: containerd has unpacked them into the container's root file
// system. On failure dir holds partial files; the caller removes it.
func UnpackParts(ctx context.Context, p ctrdcontent.Provider, man ocispec.Manifest, dir string, recs filedigest.Records) error {
	return UnpackPartsWithin(ctx, p, man, dir, recs, archive.Limits{})
}

// UnpackPartsWithin is UnpackParts with every part bounded by lim (see
// archive.Limits), and stopped when ctx ends.
func UnpackPartsWithin(ctx context.Context, p ctrdcontent.Provider, man ocispec.Manifest, dir string, recs filedigest.Records, lim archive.Limits) error {
	return UnpackPartsFrom(ctx, p, man, dir, recs, PartsOptions{Limits: lim})
}

// PartsOptions says how UnpackPartsFrom reads a runnable image's parts.
type PartsOptions struct {
	Limits archive.Limits
	// BlobDir is the content store's blobs directory on this host
	// (ROOT/io.containerd.content.v1.content/blobs for containerd's),
	// from which pages blobs are hard-linked rather than copied; "": copied.
	BlobDir string
	// Stats, when set, is filled with what the unpack linked, copied and
	// extracted.
	Stats *PartsStats
}

// PartsStats counts the bytes of a runnable image's parts by how they
// reached the work directory: pages blobs hard-linked from the content
// store (no copy), pages blobs copied, and compressed parts extracted.
type PartsStats struct {
	Linked, Copied, Extracted int64
}

// add counts part l, laid out by how.
func (s *PartsStats) add(l ocispec.Descriptor, linked bool) {
	switch {
	case s == nil:
	case l.MediaType != MediaTypeCheckpointPages:
		s.Extracted += l.Size
	case linked:
		s.Linked += l.Size
	default:
		s.Copied += l.Size
	}
}

// UnpackPartsFrom is UnpackPartsWithin with pages blobs linked from
// o.BlobDir where the file system allows.
func UnpackPartsFrom(ctx context.Context, p ctrdcontent.Provider, man ocispec.Manifest, dir string, recs filedigest.Records, o PartsOptions) error {
	lim := o.Limits
	if !IsRunnable(man.Annotations) {
		return fmt.Errorf("the image is not a runnable checkpoint image (no %s=%s): %w", AnnLayout, LayoutRunnable, ErrNotCheckpointImage)
	}
	if err := verifyPartsIn(ctx, p, man); err != nil {
		return err
	}
	budget := recordedBudget(man.Annotations, lim)
	// A pages blob is verified against its digest as it is laid out:
	// linked, it is containerd's file of that digest, which containerd
	// checked as it stored it and nobody can write; copied, the copy is
	// hashed. The manifest's check need not read its bytes once more.
	vouched := map[string]bool{}
	for _, l := range man.Layers {
		var err error
		switch l.MediaType {
		case MediaTypeCheckpointPages:
			var linked bool
			linked, err = layPagesBlob(ctx, l, dir, o.BlobDir, providerBlob(ctx, p, l), budget)
			o.Stats.add(l, linked)
			if err == nil {
				vouched[path.Base(l.Annotations[AnnPartFile])] = true
			}
		case MediaTypeCheckpointPart:
			err = unpackPart(ctx, p, l, dir, budget, lim)
			o.Stats.add(l, false)
		}
		if err != nil {
			return &LayerError{Digest: l.Digest.String(), Err: err}
		}
	}
	return verifiedWithin(ctx, verifyCheckpoint(CRIUDir(dir), recs, nil, vouched))
}

func unpackPart(ctx context.Context, p ctrdcontent.Provider, l ocispec.Descriptor, dir string, budget *archive.Budget, lim archive.Limits) error {
	ra, err := p.ReaderAt(ctx, l)
	if err != nil {
		return fmt.Errorf("checkpoint part %s is not in the content store (%v): %w", l.Digest, err, ErrIntegrity)
	}
	defer ra.Close()
	vr := content.NewVerifyReader(blobStream(ra), l)
	tarStream, closeTar, err := decompress(vr, l.MediaType)
	if err != nil {
		return err
	}
	defer closeTar()
	plain := newDigestCounter()
	if err := archive.ExtractWith(ctx, io.TeeReader(tarStream, plain), dir, extractOptions(l, budget, lim)); err != nil {
		return layerErr(l, err)
	}
	if err := finishLayer(l, digest.Digest(l.Annotations[AnnPartDiffID]), tarStream, plain, vr.Verify); err != nil {
		return err
	}
	return ctx.Err()
}

// walkRunnable feeds a runnable image to the exporter as the export layout:
// the checkpoint parts' files, and the changes' layer as rootfs-diff.tar
// (staged in a private temporary file, since a tar entry needs its size
// first). The application's layers are not part of a checkpoint export.
func (st *Store) walkRunnable(ctx context.Context, im *Image, dec *DecryptOptions, e *exporter) error {
	if err := VerifyParts(im.Config, im.Manifest, true); err != nil {
		return err
	}
	fs := 0
	for _, l := range im.Manifest.Layers {
		var err error
		switch {
		case l.MediaType == MediaTypeCheckpointPages:
			err = st.walkPagesBlob(l, e)
		case l.MediaType == MediaTypeCheckpointPart:
			err = st.walkLayer(ctx, l, digest.Digest(l.Annotations[AnnPartDiffID]), dec, e.add)
		case l.Annotations[AnnLayerPart] == PartRootfsLayer:
			err = st.exportRootfsDiff(l, im.Config.RootFS.DiffIDs[fs], e)
			fs++
		default:
			fs++
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (st *Store) exportRootfsDiff(l ocispec.Descriptor, diffID digest.Digest, e *exporter) error {
	tmp, err := os.MkdirTemp(st.Root, ".export-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := st.writeRootfsDiff(l, diffID, tmp, nil); err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(tmp, RootfsDiffName))
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	return e.add(&tar.Header{Name: RootfsDiffName, Typeflag: tar.TypeReg, Mode: 0o600, Size: fi.Size(), ModTime: fi.ModTime()}, f)
}

// walkPagesBlob adds pages blob l to the export as its file, verified.
func (st *Store) walkPagesBlob(l ocispec.Descriptor, e *exporter) error {
	name, err := partFile(l)
	if err != nil {
		return err
	}
	f, err := os.Open(st.blobPath(l))
	if err != nil {
		return fmt.Errorf("pages blob %s is missing from the store (%v): %w", l.Digest, err, ErrIntegrity)
	}
	defer f.Close()
	vr := content.NewVerifyReader(f, l)
	hdr := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: l.Size}
	if err := e.add(hdr, vr); err != nil {
		return layerErr(l, err)
	}
	if err := vr.Verify(); err != nil {
		return layerErr(l, err)
	}
	return nil
}

// blobFile opens blob l of the store.
func (st *Store) blobFile(l ocispec.Descriptor) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return os.Open(st.blobPath(l)) }
}
