package ociimage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/manifest"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Image is a checkpoint image's manifest and config, read from a store.
type Image struct {
	Ref      string
	Desc     ocispec.Descriptor
	Manifest ocispec.Manifest
	Config   ocispec.Image
}

// Kind is the checkpoint's kind from its annotations (see imageKind).
func (im *Image) Kind() Kind { return imageKind(im.Manifest.Annotations) }

// LoadImage reads ref's manifest and config from the store, verifying both
// against their digests, and refuses an image that is not a checkpoint.
func (st *Store) LoadImage(ctx context.Context, ref string) (*Image, error) {
	d, err := st.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	im := &Image{Ref: ref, Desc: d}
	if err := st.readJSON(ctx, d, &im.Manifest); err != nil {
		return nil, err
	}
	if !isCheckpointImage(im.Manifest.Annotations) {
		return nil, report.WithRemedy(fmt.Errorf("%s has none of the checkpoint annotations (%s, %s): %w", ref, AnnKind, AnnCRIUContainerName, ErrNotCheckpointImage), "give an image made by `cryo image build` or `podman container checkpoint --create-image`")
	}
	if err := st.readJSON(ctx, im.Manifest.Config, &im.Config); err != nil {
		return nil, err
	}
	if n := len(fsLayers(im.Manifest)); len(im.Config.RootFS.DiffIDs) != n {
		return nil, fmt.Errorf("%s: config lists %d layers, manifest %d: %w", ref, len(im.Config.RootFS.DiffIDs), n, ErrIntegrity)
	}
	return im, nil
}

func (st *Store) readJSON(ctx context.Context, d ocispec.Descriptor, v any) error {
	if d.Size > 4<<20 {
		return fmt.Errorf("%s: %d bytes is too big for a manifest or config: %w", d.Digest, d.Size, ErrIntegrity)
	}
	rc, err := st.oci.Fetch(ctx, d)
	if err != nil {
		return fmt.Errorf("read %s: %w", d.Digest, err)
	}
	defer rc.Close()
	data, err := content.ReadAll(rc, d)
	if err != nil {
		return fmt.Errorf("%s does not match its digest (%v): %w", d.Digest, err, ErrIntegrity)
	}
	return json.Unmarshal(data, v)
}

// Unpack writes the checkpoint of ref into dir (created, 0700; it must not
// exist or be empty), verifying every layer against its digest and its
// diff_id, and every CRIU image file against cryo's manifest, before it
// returns: nothing unverified reaches CRIU. On any failure dir is removed.
func (st *Store) Unpack(ctx context.Context, ref, dir string, dec *DecryptOptions) (*Image, error) {
	return st.UnpackWith(ctx, ref, dir, UnpackOptions{Decrypt: dec})
}

// UnpackOptions configures UnpackWith.
type UnpackOptions struct {
	Decrypt *DecryptOptions // the keys of an encrypted image; nil: none
	// Progress draws the extraction (bytes of the layers read, rate, ETA)
	// and the verification of the files; nil: silent.
	Progress *progress.Renderer
	// Limits bound every layer's entries (see archive.Limits); zero: the
	// defaults.
	Limits archive.Limits
}

// UnpackWith is Unpack with its options.
func (st *Store) UnpackWith(ctx context.Context, ref, dir string, o UnpackOptions) (im *Image, err error) {
	im, err = st.LoadImage(ctx, ref)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, archive.DirMode); err != nil {
		return nil, err
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		return nil, report.WithRemedy(fmt.Errorf("unpack %s: %s is not empty", ref, dir), "give a new directory")
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := st.unpackLayers(ctx, im, dir, o); err != nil {
		return nil, &report.StepError{Op: "unpack", ID: ref, Err: err, Remedy: remedyFor(err)}
	}
	t := o.Progress.Start("verifying the checkpoint files of "+ref, 0)
	err = verifiedWithin(ctx, verifyCheckpoint(criuDirOf(dir, im.Kind()), st.Records, t, nil))
	t.End(err)
	if err != nil {
		remedy := "pull the image again, or rebuild it from the checkpoint"
		if errors.Is(err, config.ErrRestoreDeadline) {
			remedy = config.RestoreDeadlineRemedy
		}
		return nil, &report.StepError{Op: "unpack", ID: ref, Err: err, Remedy: remedy}
	}
	return im, nil
}

// unpackLayers extracts every layer in order, under one progress line
// counting the stored (compressed) bytes read.
func (st *Store) unpackLayers(ctx context.Context, im *Image, dir string, o UnpackOptions) (err error) {
	var total int64
	for _, l := range im.Manifest.Layers {
		total += l.Size
	}
	t := o.Progress.Start("unpack "+im.Ref, total)
	defer func() { t.End(endErr(ctx, err)) }()
	budget := recordedBudget(im.Manifest.Annotations, o.Limits)
	if IsRunnable(im.Manifest.Annotations) {
		return st.unpackRunnable(ctx, im, dir, o, budget, t)
	}
	for i, l := range im.Manifest.Layers {
		if err := st.unpackLayer(ctx, l, im.Config.RootFS.DiffIDs[i], dir, o, budget, t); err != nil {
			return &LayerError{Digest: l.Digest.String(), Err: err}
		}
	}
	return nil
}

// budgetSlack covers the small files an image holds beyond those its size
// annotation counts.
const budgetSlack = 1 << 20

// recordedBudget bounds an unpack by the size that cryo recorded at build
// (its size.total annotation); an image without it (built by Podman or
// CRI-O) is bounded by the free space alone. Every entry costs
// archive.HeaderCost in it, which the annotation does not count: the
// budget allows the headers of the cap's entries. The entries of all the
// image's layers are bounded together by the cap too, so that spreading
// them over many layers does not multiply it.
func recordedBudget(ann map[string]string, lim archive.Limits) *archive.Budget {
	entries := cmp.Or(lim.MaxEntries, archive.DefaultMaxEntries)
	total, err := strconv.ParseInt(ann[AnnSizeTotal], 10, 64)
	if err != nil || total < 0 {
		// No recorded size: the entries of all the layers are bounded
		// together all the same.
		return &archive.Budget{Left: math.MaxInt64, MaxEntries: entries, Source: "free space"}
	}
	return &archive.Budget{Left: total + budgetSlack + int64(entries)*archive.HeaderCost, MaxEntries: entries,
		Source: fmt.Sprintf("%d bytes the image records for its files (%s), with %d bytes a header for up to %d entries", total, AnnSizeTotal, archive.HeaderCost, entries)}
}

func remedyFor(err error) string {
	switch {
	case errors.Is(err, ErrDecrypt):
		return ""
	case errors.Is(err, archive.ErrUnsafeEntry):
		return "do not restore this image"
	case errors.Is(err, ErrPartsMismatch), errors.Is(err, ErrPartsUnbound):
		return RemedyParts
	case errors.Is(err, archive.ErrLimit):
		return "" // the LimitError's own
	case errors.Is(err, config.ErrRestoreDeadline):
		return config.RestoreDeadlineRemedy
	case errors.Is(err, ErrNoSpace):
		return "free space where the image is unpacked ($CRYO_RESTORE_DIR, default /var/lib/cryo/restore), then retry; the image itself is kept"
	default:
		return "remove it (`cryo image rm`) and pull it again"
	}
}

// criuDirOf is where an unpacked image keeps its CRIU images.
func criuDirOf(dir string, _ Kind) string { return filepath.Join(dir, checkpointDir) }

// CRIUDir is the CRIU image directory of an unpacked image in dir.
func CRIUDir(dir string) string { return criuDirOf(dir, "") }

// verifyCheckpoint checks the CRIU files against cryo's manifest, when the
// checkpoint has one (a Podman checkpoint without cryo has none); the files
// vouched names (relative to dir) were verified as they were laid out and
// are not hashed again.
func verifyCheckpoint(dir string, recs filedigest.Records, p filedigest.Progress, vouched map[string]bool) error {
	m, err := manifest.Read(dir)
	if errors.Is(err, manifest.ErrNoManifest) {
		return nil
	}
	if err != nil {
		return err
	}
	// Stamped: the restore that follows an unpack need not hash it again.
	_, err = recs.VerifyStampedVouched(dir, m.Digests, p, vouched)
	return err
}

// unpackLayer streams one blob through digest verification, decryption,
// decompression and safe extraction, then checks the size, digest and
// diff_id; a mismatch fails the unpack (and dir is removed).
func (st *Store) unpackLayer(ctx context.Context, l ocispec.Descriptor, diffID digest.Digest, dir string, o UnpackOptions, budget *archive.Budget, t *progress.Task) error {
	tarStream, verify, closeFn, err := st.openLayer(l, o.Decrypt, t)
	if err != nil {
		return err
	}
	defer closeFn()
	plain := newDigestCounter()
	if err := archive.ExtractWith(ctx, io.TeeReader(tarStream, plain), dir, extractOptions(l, budget, o.Limits)); err != nil {
		return layerErr(l, err)
	}
	if err := finishLayer(l, diffID, tarStream, plain, verify); err != nil {
		return err
	}
	return ctx.Err()
}

// openLayer opens layer l of the store as its tar stream: decrypted with
// dec, decompressed, and checked against l's size and digest by verify
// once the stream has been read to its end.
func (st *Store) openLayer(l ocispec.Descriptor, dec *DecryptOptions, t *progress.Task) (tarStream io.Reader, verify func() error, closeFn func(), err error) {
	f, err := os.Open(st.blobPath(l))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("layer %s is missing from the store (%v): %w", l.Digest, err, ErrIntegrity)
	}
	vr := content.NewVerifyReader(t.Reader(f), l) // t counts the stored bytes read
	var r io.Reader = vr
	if strings.HasSuffix(l.MediaType, encryptedSuffix) {
		if r, err = decryptLayer(r, l, dec); err != nil {
			f.Close()
			return nil, nil, nil, err
		}
	}
	tarStream, closeTar, err := decompress(r, strings.TrimSuffix(l.MediaType, encryptedSuffix))
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	return tarStream, vr.Verify, func() { closeTar(); f.Close() }, nil
}

// finishLayer drains the padding after the tar's end, so that the diff_id
// covers it all, and checks the blob's digest and the diff_id.
func finishLayer(l ocispec.Descriptor, diffID digest.Digest, tarStream io.Reader, plain *digestCounter, verify func() error) error {
	if _, err := io.Copy(plain, tarStream); err != nil {
		return layerErr(l, err)
	}
	if err := verify(); err != nil {
		return layerErr(l, err)
	}
	if plain.Digest() != diffID {
		return fmt.Errorf("layer %s: uncompressed content %s does not match diff_id %s: %w", l.Digest, plain.Digest(), diffID, ErrIntegrity)
	}
	return nil
}

func layerErr(l ocispec.Descriptor, err error) error {
	if errors.Is(err, archive.ErrUnsafeEntry) || errors.Is(err, ErrDecrypt) || stoppedEarly(err) {
		return err
	}
	// A full disk is not a corrupt layer: the image must not be deleted
	// for it.
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, archive.ErrTooLarge) {
		return fmt.Errorf("layer %s (%s): %v: %w", l.Digest.Encoded()[:12], human(l.Size), err, ErrNoSpace)
	}
	return fmt.Errorf("layer %s (%s) is truncated or corrupt: %v: %w", l.Digest.Encoded()[:12], human(l.Size), err, ErrIntegrity)
}

func decompress(r io.Reader, mediaType string) (io.Reader, func(), error) {
	switch mediaType {
	case ocispec.MediaTypeImageLayerZstd, MediaTypeCheckpointPart:
		zr, err := zstd.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	case ocispec.MediaTypeImageLayerGzip, "application/vnd.docker.image.rootfs.diff.tar.gzip":
		return gzipReader(r)
	case ocispec.MediaTypeImageLayer, "application/vnd.docker.image.rootfs.diff.tar":
		return r, func() {}, nil
	}
	return nil, nil, fmt.Errorf("layer media type %q is not supported: %w", mediaType, ErrNotCheckpointImage)
}
