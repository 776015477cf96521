package ociimage

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"

	"github.com/cryo-gpu/cryo/internal/manifest"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/report"
)

// DefaultSplitAt is the pages-file size from which a pages file gets a
// layer of its own.
const DefaultSplitAt = 64 << 20

// BuildOptions configures Build.
type BuildOptions struct {
	Ref     string               // the tag in the local store, e.g. registry/ns/name:tag
	SplitAt int64                // see DefaultSplitAt; <0: one layer for all
	Level   zstd.EncoderLevel    // 0: zstd.SpeedDefault
	Encrypt *EncryptOptions      // nil: plain layers
	Log     func(string, ...any) // a line per layer built; nil: on Progress
	// Progress draws the verification of the checkpoint's files and the
	// compression (bytes packed of the raw total, rate, ETA); nil: silent.
	Progress *progress.Renderer

	// Runnable builds a runnable checkpoint image (see runnable.go) on
	// Base, or on the image the checkpoint names.
	Runnable bool
	Base     string
	Remote   RemoteOptions // where the base image is pulled from
	// CompressPages packs a runnable image's pages files into compressed
	// parts, as cryo did before pages blobs (rawpages.go): fewer registry
	// bytes, and a full copy at every restore.
	CompressPages bool

	rawPages   bool               // pages plans become pages blobs (buildParts)
	ownedFiles bool               // the source's files are cryo's own temporary layout
	sums       map[string]fileSum // digests its extraction took, by path

	task *progress.Task // the compression's line, while writeLayers runs
}

// Build packs src into an image tagged o.Ref in the store. It refuses a
// checkpoint without cryo's manifest, and one whose files do not match it:
// packing a corrupt checkpoint only moves the failure to another host.
func Build(ctx context.Context, st *Store, src *Source, o BuildOptions) (ocispec.Descriptor, *Summary, error) {
	if err := CheckRef(o.Ref); err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	if err := requireManifest(src, o.Ref); err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	t := o.Progress.Start("verifying the checkpoint files of "+o.Ref, 0)
	err := st.verifySource(src, t)
	t.End(err)
	if err != nil {
		return ocispec.Descriptor{}, nil, &report.StepError{Op: "build", ID: o.Ref, Err: err, Remedy: "re-take the checkpoint"}
	}
	sum, err := Summarize(src)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	if o.Runnable {
		return st.buildRunnableImage(ctx, src, sum, o)
	}
	layers, diffIDs, err := st.writeLayers(ctx, src, o)
	if err != nil {
		return ocispec.Descriptor{}, nil, &report.StepError{Op: "build", ID: o.Ref, Err: err, Remedy: "check free space in " + st.Root}
	}
	desc, err := st.commit(ctx, o.Ref, src, sum, layers, diffIDs)
	if err != nil {
		return desc, nil, &report.StepError{Op: "build", ID: o.Ref, Err: err}
	}
	sum.Digest, sum.Encrypted = desc.Digest.String(), o.Encrypt != nil
	sum.addLayers(layers)
	return desc, sum, nil
}

// verifySource checks src's files against its manifest. A checkpoint
// directory that cryo hashed on this host and that nobody has changed
// since (its stamp: see package digest's stamp.go) is not hashed again,
// so that the build's one read of it is the compression's. A layout cryo
// extracted itself is always hashed, and gets no stamp: it is removed
// after the build.
func (st *Store) verifySource(src *Source, p filedigest.Progress) error {
	if src.cleanup != nil {
		return filedigest.VerifyWith(src.CRIU, src.Manifest.Digests, p)
	}
	_, err := st.Records.VerifyStampedWith(src.CRIU, src.Manifest.Digests, p)
	return err
}

// buildRunnableImage is Build for a runnable image.
func (st *Store) buildRunnableImage(ctx context.Context, src *Source, sum *Summary, o BuildOptions) (ocispec.Descriptor, *Summary, error) {
	desc, layers, err := st.buildRunnable(ctx, src, sum, o)
	if err != nil {
		var se *report.StepError
		if errors.As(err, &se) {
			return desc, nil, err
		}
		return desc, nil, &report.StepError{Op: "build", ID: o.Ref, Err: err, Remedy: "check free space in " + st.Root}
	}
	sum.Digest = desc.Digest.String()
	sum.addLayers(layers)
	return desc, sum, nil
}

// addLayers records the image's own layers (not a base image's) and sizes.
func (sum *Summary) addLayers(layers []ocispec.Descriptor) {
	for _, l := range layers {
		sum.Sizes.Compressed += l.Size
		sum.Layers = append(sum.Layers, LayerInfo{Part: l.Annotations[AnnLayerPart], MediaType: l.MediaType, Digest: l.Digest.String(), Size: l.Size})
	}
	sum.Sizes.Ratio = ratio(sum.Sizes.Total, sum.Sizes.Compressed)
}

// requireManifest refuses a source that has no readable cryo manifest (a
// plain CRIU dump, an export of Podman or CRI-O without cryo-runc): with
// none, nothing of its files could be verified, here or where the image
// goes, and a container's restore refuses it there anyway. OpenSource
// keeps no reason for a missing manifest; reading it again gives it.
func requireManifest(src *Source, ref string) error {
	if src.Manifest != nil {
		return nil
	}
	_, err := manifest.Read(src.CRIU)
	if err == nil {
		err = fmt.Errorf("%s: %w", src.CRIU, manifest.ErrNoManifest)
	}
	return &report.StepError{Op: "build", ID: ref, Err: fmt.Errorf("the checkpoint was not taken through cryo: %w", err),
		Remedy: "checkpoint through cryo (cryo-runc, the cryo shim, or `cryo checkpoint`), which writes the manifest, and build from that checkpoint"}
}

func ratio(raw, packed int64) float64 {
	if packed == 0 {
		return 0
	}
	return float64(raw) / float64(packed)
}

func (st *Store) writeLayers(ctx context.Context, src *Source, o BuildOptions) ([]ocispec.Descriptor, []digest.Digest, error) {
	size := func(e archive.Entry) int64 {
		fi, err := os.Stat(e.Path)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	split := o.SplitAt
	if split == 0 {
		split = DefaultSplitAt
	}
	plans := planLayers(src.Files, size, split)
	o.task = o.Progress.Start("build "+o.Ref, rawBytes(plans, size, o.Encrypt != nil))
	descs, diffIDs, err := st.buildLayers(ctx, plans, o)
	o.task.End(endErr(ctx, err))
	return descs, diffIDs, err
}

// rawBytes is what the compression reads: every file once, twice for an
// encrypted image (see buildEncryptedLayer).
func rawBytes(plans []layerPlan, size func(archive.Entry) int64, encrypted bool) int64 {
	var n int64
	for _, p := range plans {
		for _, e := range p.Entries {
			n += size(e)
		}
	}
	if encrypted {
		n *= 2
	}
	return n
}

func (st *Store) buildLayers(ctx context.Context, plans []layerPlan, o BuildOptions) ([]ocispec.Descriptor, []digest.Digest, error) {
	var descs []ocispec.Descriptor
	var diffIDs []digest.Digest
	for _, p := range plans {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		d, diffID, err := st.buildPlan(p, o)
		if err != nil {
			return nil, nil, err
		}
		if o.Log != nil {
			o.Log("layer %-6s %s  %s", p.Part, d.Digest.Encoded()[:12], human(d.Size))
		} else {
			o.Progress.Println(fmt.Sprintf("build %s: layer %-6s %s  %s", o.Ref, p.Part, d.Digest.Encoded()[:12], human(d.Size)))
		}
		descs, diffIDs = append(descs, d), append(diffIDs, diffID)
	}
	return descs, diffIDs, nil
}

// buildPlan stores one plan: a pages blob, or a layer.
func (st *Store) buildPlan(p layerPlan, o BuildOptions) (ocispec.Descriptor, digest.Digest, error) {
	if o.rawPages && p.Part == PartPages && len(p.Entries) == 1 {
		d, err := st.buildPagesBlob(p, o.task, o.ownedFiles, o.sums)
		return d, d.Digest, err
	}
	return st.buildLayer(p, o)
}

// buildLayer compresses (and maybe encrypts) one layer into the store.
func (st *Store) buildLayer(p layerPlan, o BuildOptions) (ocispec.Descriptor, digest.Digest, error) {
	if o.Encrypt != nil {
		return st.buildEncryptedLayer(p, o)
	}
	f, err := os.CreateTemp(st.blobDir(), ".build-*")
	if err != nil {
		return ocispec.Descriptor{}, "", fmt.Errorf("create layer: %w", err)
	}
	defer os.Remove(f.Name())
	d, diffID, err := compressLayer(f, p, o.Level, o.task)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write %s layer: %w", p.Part, cerr)
	}
	if err != nil {
		return d, "", err
	}
	if err := os.Rename(f.Name(), st.blobPath(d)); err != nil {
		return d, "", fmt.Errorf("store layer: %w", err)
	}
	return d, diffID, nil
}

// buildEncryptedLayer never writes the plain layer to disk: a first pass
// compresses it only to learn its digest (which ocicrypt records inside the
// encryption, for the decrypting side to check), a second compresses it
// again straight into the encryption. The two must agree: files that
// changed in between fail the build.
func (st *Store) buildEncryptedLayer(p layerPlan, o BuildOptions) (ocispec.Descriptor, digest.Digest, error) {
	plain, diffID, err := compressLayer(io.Discard, p, o.Level, o.task)
	if err != nil {
		return plain, "", err
	}
	pr, pw := io.Pipe()
	again := make(chan ocispec.Descriptor, 1)
	go func() {
		d, _, err := compressLayer(pw, p, o.Level, o.task)
		again <- d
		pw.CloseWithError(err)
	}()
	d, err := st.encryptLayer(pr, plain, o.Encrypt)
	pr.CloseWithError(errors.New("encryption ended")) // let the compressor stop
	if second := <-again; err == nil && second.Digest != plain.Digest {
		err = fmt.Errorf("%s layer changed while it was built (%s, then %s): the checkpoint directory must not change during a build", p.Part, plain.Digest, second.Digest)
	}
	return d, diffID, err
}

// compressLayer writes the layer's tar, zstd-compressed with one encoder
// goroutine per core, to w; it returns the descriptor of the compressed
// stream and the digest of the uncompressed tar (diff_id). The task counts
// the uncompressed bytes.
func compressLayer(w io.Writer, p layerPlan, level zstd.EncoderLevel, task *progress.Task) (ocispec.Descriptor, digest.Digest, error) {
	var d ocispec.Descriptor
	fail := func(err error) (ocispec.Descriptor, digest.Digest, error) {
		return d, "", fmt.Errorf("write %s layer: %w", p.Part, err)
	}
	if level == 0 {
		level = zstd.SpeedDefault
	}
	packed := newDigestCounter()
	zw, err := zstd.NewWriter(multi(w, packed), zstd.WithEncoderConcurrency(goruntime.NumCPU()), zstd.WithEncoderLevel(level))
	if err != nil {
		return fail(err)
	}
	plain := newDigestCounter()
	if err := archive.Write(multi(zw, plain, task), p.Entries); err != nil {
		zw.Close()
		return fail(err)
	}
	if err := zw.Close(); err != nil {
		return fail(err)
	}
	d = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerZstd, Digest: packed.Digest(), Size: packed.n,
		Annotations: map[string]string{AnnLayerPart: p.Part}}
	return d, plain.Digest(), nil
}

func (st *Store) blobDir() string { return st.Root + "/blobs/sha256" }

// commit writes the config and manifest and tags the manifest.
func (st *Store) commit(ctx context.Context, ref string, src *Source, sum *Summary, layers []ocispec.Descriptor, diffIDs []digest.Digest) (ocispec.Descriptor, error) {
	ann := imageAnnotations(src, sum)
	return st.commitManifest(ctx, ref, imageConfig(sum, diffIDs, ann), layers, ann)
}

func (st *Store) pushJSON(ctx context.Context, mediaType string, v any) (ocispec.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	d := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := st.oci.Push(ctx, d, bytes.NewReader(data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return d, err
	}
	return d, nil
}

// imageAnnotations are cryo's summary plus, for container checkpoints (which
// carry config.dump and spec.dump), the annotations checkpointctl and CRI-O
// look for, and Podman's for Podman checkpoints.
func imageAnnotations(src *Source, sum *Summary) map[string]string {
	a := sum.annotations()
	a[AnnCRIUEngine] = engineName
	if src.Kind == KindProcess {
		return a
	}
	name := cmp.Or(src.Name, "checkpoint")
	a[AnnCRIUContainerName] = name
	setIf(a, AnnCRIURootfsImage, src.BaseImage)
	if src.Kind == KindContainerd || src.Kind == KindKubelet {
		// Podman cannot restore a containerd checkpoint: do not invite it.
		setIf(a, AnnContainerdRuntime, src.Runtime)
		return a
	}
	a[AnnPodmanName] = name
	setIf(a, AnnPodmanRootfsImage, src.BaseImage)
	setIf(a, AnnPodmanRawImageName, src.BaseImage)
	setIf(a, AnnPodmanRuntime, src.Runtime)
	return a
}

func imageConfig(sum *Summary, diffIDs []digest.Digest, ann map[string]string) ocispec.Image {
	created := sum.Created
	history := make([]ocispec.History, len(diffIDs))
	for i := range history {
		history[i] = ocispec.History{Created: &created, CreatedBy: "cryo image build"}
	}
	return ocispec.Image{
		Created:  &created,
		Author:   engineName,
		Platform: ocispec.Platform{Architecture: goruntime.GOARCH, OS: "linux"},
		Config:   ocispec.ImageConfig{Labels: ann},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: diffIDs},
		History:  history,
	}
}
