package ociimage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/report"
)

// TransferOptions configures Push and Pull.
type TransferOptions struct {
	RemoteOptions
	Attempts    int // whole-transfer attempts; 0: 3
	Concurrency int // blobs in flight; 0: 4
	// Renderer draws one progress line per image (bytes, rate, ETA) and a
	// line per layer the destination already has; nil: Progress, if set.
	Renderer *progress.Renderer
	// Progress is an older form: plain progress lines on this writer.
	Progress io.Writer
	// Verify, when set, judges a pull's manifest before any layer moves.
	Verify Verifier
}

// renderer is where the progress goes; nil: nowhere.
func (o TransferOptions) renderer() *progress.Renderer {
	if o.Renderer != nil || o.Progress == nil {
		return o.Renderer
	}
	return progress.New(o.Progress, false)
}

func (o TransferOptions) attempts() int {
	if o.Attempts <= 0 {
		return 3
	}
	return o.Attempts
}

// Push sends ref from the store to its registry. Blobs the registry already
// has are skipped, so a push that was interrupted restarts where it stopped,
// blob by blob; each attempt is retried (with oras's retrying transport
// underneath for single requests).
func (st *Store) Push(ctx context.Context, ref string, o TransferOptions) (ocispec.Descriptor, error) {
	im, err := st.LoadImage(ctx, ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	repo, err := newRepository(ref, o.RemoteOptions)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	p := newTransferTask(o.renderer(), "push "+ref, totalSize(im.Manifest)+im.Desc.Size)
	src := &countingTarget{ReadOnlyTarget: st.oci, p: p}
	d, err := transfer(ctx, "push", ref, o, p, func() (ocispec.Descriptor, error) {
		return oras.Copy(ctx, src, ref, repo, tagOf(repo), copyOptions(o, p))
	})
	p.end(ctx, err)
	return d, err
}

// Pull fetches ref from its registry into the store. It reads the manifest
// first and refuses an image that is not a checkpoint before any layer
// moves. Every blob is verified against its size and digest as it is
// written; blobs already in the store are skipped, so an interrupted pull
// restarts cleanly.
func (st *Store) Pull(ctx context.Context, ref string, o TransferOptions) (ocispec.Descriptor, error) {
	repo, err := newRepository(ref, o.RemoteOptions)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	man, md, err := remoteManifest(ctx, ref, o.RemoteOptions)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if o.Verify != nil {
		if err := o.Verify.VerifyPull(ctx, ref, md, repo); err != nil {
			return ocispec.Descriptor{}, err
		}
	}
	p := newTransferTask(o.renderer(), "pull "+ref, totalSize(*man)+md.Size)
	src := &countingTarget{ReadOnlyTarget: repo, p: p}
	// By digest: the manifest checked above, even if the tag has moved since.
	d, err := transfer(ctx, "pull", ref, o, p, func() (ocispec.Descriptor, error) {
		return oras.Copy(ctx, src, md.Digest.String(), st.oci, ref, copyOptions(o, p))
	})
	if err == nil {
		st.privateLayers(man.Layers)
	}
	p.end(ctx, err)
	return d, err
}

// privateLayers makes pulled layers readable by the owner only: they hold
// process memory. A pages blob is also made read-only, as one built here:
// a restore links it for CRIU to read, and only a file nobody can write
// is linked (rawpages.go).
func (st *Store) privateLayers(layers []ocispec.Descriptor) {
	for _, l := range layers {
		mode := os.FileMode(0o600)
		if l.MediaType == MediaTypeCheckpointPages {
			mode = pagesBlobMode
		}
		os.Chmod(st.blobPath(l), mode)
	}
}

func remoteManifest(ctx context.Context, ref string, o RemoteOptions) (*ocispec.Manifest, ocispec.Descriptor, error) {
	repo, err := newRepository(ref, o)
	if err != nil {
		return nil, ocispec.Descriptor{}, err
	}
	d, rc, err := repo.FetchReference(ctx, tagOf(repo))
	if err != nil {
		remedy := cmp.Or(registryRemedy(err, ref), "check the reference "+ref+" and the registry's address")
		return nil, d, &report.StepError{Op: "resolve", ID: ref, Err: fmt.Errorf("%w: %w", err, ErrTransfer), Remedy: remedy}
	}
	defer rc.Close()
	data, err := content.ReadAll(rc, d)
	if err != nil {
		return nil, d, fmt.Errorf("manifest of %s: %v: %w", ref, err, ErrIntegrity)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil || d.MediaType != ocispec.MediaTypeImageManifest || !isCheckpointImage(m.Annotations) {
		return nil, d, report.WithRemedy(fmt.Errorf("%s (%s) is not a checkpoint image: it has none of the checkpoint annotations (%s, %s): %w", ref, d.MediaType, AnnKind, AnnCRIUContainerName, ErrNotCheckpointImage), "give an image made by `cryo image build`")
	}
	return &m, d, nil
}

func tagOf(repo *remote.Repository) string {
	if r := repo.Reference.Reference; r != "" {
		return r
	}
	return "latest"
}

func totalSize(m ocispec.Manifest) int64 {
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}

func copyOptions(o TransferOptions, p *transferTask) oras.CopyOptions {
	opts := oras.DefaultCopyOptions
	opts.Concurrency = o.Concurrency
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	opts.OnCopySkipped = func(_ context.Context, d ocispec.Descriptor) error {
		p.skipped(d)
		return nil
	}
	opts.PostCopy = func(_ context.Context, d ocispec.Descriptor) error {
		p.copied(d)
		return nil
	}
	return opts
}

// transfer runs one copy with whole-copy retries. Integrity failures are
// not retried: the same bytes would fail again.
func transfer(ctx context.Context, step, ref string, o TransferOptions, p *transferTask, copyFn func() (ocispec.Descriptor, error)) (ocispec.Descriptor, error) {
	var err error
	for attempt := 1; attempt <= o.attempts(); attempt++ {
		var d ocispec.Descriptor
		d, err = copyFn()
		if err == nil {
			return d, nil
		}
		err = classify(err)
		if errors.Is(err, ErrIntegrity) || ctx.Err() != nil || attempt == o.attempts() {
			break
		}
		p.retry(attempt, err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
	remedy := "check the registry and retry; blobs already transferred are kept"
	if r := registryRemedy(err, ref); r != "" {
		remedy = r + "; blobs already transferred are kept"
	}
	if errors.Is(err, ErrIntegrity) {
		remedy = "the registry holds damaged data: rebuild and push the image again"
	}
	return ocispec.Descriptor{}, &report.StepError{Op: step, ID: ref, Err: err, Remedy: remedy}
}

// classify marks size and digest mismatches as integrity failures.
func classify(err error) error {
	for _, e := range []error{content.ErrMismatchedDigest, content.ErrTrailingData, io.ErrUnexpectedEOF} {
		if errors.Is(err, e) {
			return fmt.Errorf("a blob does not match its digest or size (truncated or tampered): %w: %w", err, ErrIntegrity)
		}
	}
	if isSizeMismatch(err) {
		return fmt.Errorf("a blob does not match its size (truncated or tampered): %w: %w", err, ErrIntegrity)
	}
	return fmt.Errorf("%w: %w", err, ErrTransfer)
}

// RemoteImage reads ref's manifest from its registry alone, no layer: what
// a restore checks (kind, name, base image, pids, GPUs) before it pulls
// gigabytes. Config is left empty.
func RemoteImage(ctx context.Context, ref string, o RemoteOptions) (*Image, error) {
	m, d, err := remoteManifest(ctx, ref, o)
	if err != nil {
		return nil, err
	}
	return &Image{Ref: ref, Desc: d, Manifest: *m}, nil
}
