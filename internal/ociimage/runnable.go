package ociimage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
)

// A runnable checkpoint image is a container image first: its layers are
// the application's image plus one layer of the container's changes, so a
// runtime that knows nothing of checkpoints (or a policy that declines the
// restore) starts the application fresh from it, and the kubelet pulls it
// like any image, with the pod's credentials, the node's mirrors and its
// garbage collection. The checkpoint itself (the CRIU images, cryo's
// manifest, config.dump, spec.dump) travels in the same manifest as blobs
// of a media type that is not a layer type: containerd 1.7 and 2.x fetch
// every blob a manifest lists into their content store but unpack only the
// layer types (the config's diff_ids count those alone), so the checkpoint
// is never applied to the root file system. The cryo shim reads those
// blobs from containerd's content store when it creates the task.
const (
	// AnnLayout is "runnable" on a runnable checkpoint image.
	AnnLayout      = annPrefix + "layout"
	LayoutRunnable = "runnable"
	// MediaTypeCheckpointPart is a part of the checkpoint: a zstd tar of
	// files of the export layout (checkpoint/…, config.dump, …).
	MediaTypeCheckpointPart = "application/vnd.cryo.checkpoint.part.v1.tar+zstd"
	// PartRootfsLayer marks the layer of the container's changes.
	PartRootfsLayer = "rootfs-layer"
)

// ErrNoBaseImage: a runnable image needs the application's image.
var ErrNoBaseImage = errors.New("no base image to build a runnable checkpoint image on")

// IsRunnable reports whether manifest annotations mark a runnable
// checkpoint image.
func IsRunnable(ann map[string]string) bool { return ann[AnnLayout] == LayoutRunnable }

// buildRunnable packs src as a runnable image on the base image o.Base (or
// the one the checkpoint names), which is pulled into the store.
func (st *Store) buildRunnable(ctx context.Context, src *Source, sum *Summary, o BuildOptions) (ocispec.Descriptor, []ocispec.Descriptor, error) {
	if o.Encrypt != nil {
		return ocispec.Descriptor{}, nil, errors.New("a runnable checkpoint image cannot be encrypted: the shim reads it from containerd's content store without keys; build it without --encrypt")
	}
	baseRef := cmp.Or(o.Base, src.BaseImage)
	if baseRef == "" {
		return ocispec.Descriptor{}, nil, fmt.Errorf("%w: the checkpoint names none; pass --base IMAGE", ErrNoBaseImage)
	}
	base, baseCfg, err := st.fetchBase(ctx, baseRef, o)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	rootfs, rootfsDiff, err := st.buildRootfsLayer(src, o)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	parts, err := st.buildParts(ctx, src, o)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	layers := append(append(append([]ocispec.Descriptor{}, base.Layers...), rootfs), parts...)
	cfg := runnableConfig(baseCfg, rootfsDiff, sum.Created)
	ann := imageAnnotations(src, sum)
	ann[AnnLayout] = LayoutRunnable
	ann[AnnBaseImage] = baseRef
	// containerd's own CRI restore takes an image with checkpointctl's
	// annotation for a checkpoint archive of its own: this one is not.
	delete(ann, AnnCRIUContainerName)
	delete(ann, AnnCRIURootfsImage)
	cfg = bindParts(cfg, layers, ann) // see runnable_bind.go
	desc, err := st.commitManifest(ctx, o.Ref, cfg, layers, ann)
	return desc, append([]ocispec.Descriptor{rootfs}, parts...), err
}

// AnnBaseImage names the application's image a runnable image stacks on.
const AnnBaseImage = annPrefix + "base-image"

// buildParts packs every file but the rootfs diff into checkpoint parts.
func (st *Store) buildParts(ctx context.Context, src *Source, o BuildOptions) ([]ocispec.Descriptor, error) {
	var files = src.Files[:0:0]
	for _, f := range src.Files {
		if f.Name != RootfsDiffName {
			files = append(files, f)
		}
	}
	ws := *src
	ws.Files = files
	o.rawPages, o.ownedFiles, o.sums = !o.CompressPages, src.cleanup != nil, src.sums
	descs, diffIDs, err := st.writeLayers(ctx, &ws, o)
	for i := range descs {
		if descs[i].MediaType == MediaTypeCheckpointPages {
			continue // the blob is the file: its digest says it all
		}
		// Not a layer: its uncompressed digest has no place in the
		// config's diff_ids, so it travels on the descriptor.
		descs[i].MediaType = MediaTypeCheckpointPart
		descs[i].Annotations[AnnPartDiffID] = diffIDs[i].String()
	}
	return descs, err
}

// AnnPartDiffID is a checkpoint part's uncompressed digest.
const AnnPartDiffID = annPrefix + "part.diff-id"

// runnableConfig is the base image's config with the changes' layer on top.
func runnableConfig(base ocispec.Image, diffID digest.Digest, created time.Time) ocispec.Image {
	cfg := base
	cfg.RootFS.DiffIDs = append(append([]digest.Digest{}, base.RootFS.DiffIDs...), diffID)
	cfg.History = append(append([]ocispec.History{}, base.History...),
		ocispec.History{Created: &created, CreatedBy: "cryo image build --runnable: the container's changes at the checkpoint"})
	cfg.Created = &created
	return cfg
}

// commitManifest writes the config and the manifest and tags it.
func (st *Store) commitManifest(ctx context.Context, ref string, cfg ocispec.Image, layers []ocispec.Descriptor, ann map[string]string) (ocispec.Descriptor, error) {
	cfgDesc, err := st.pushJSON(ctx, ocispec.MediaTypeImageConfig, cfg)
	if err != nil {
		return cfgDesc, err
	}
	man := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cfgDesc, Layers: layers, Annotations: ann}
	desc, err := st.pushJSON(ctx, ocispec.MediaTypeImageManifest, man)
	if err != nil {
		return desc, err
	}
	return desc, st.oci.Tag(ctx, desc, ref)
}

// fetchBase copies the base image (for this host's platform) into the
// store and reads its manifest and config. Its layers are the new image's
// first layers, shared blob for blob, so a registry that has the base
// receives only the changes and the checkpoint.
func (st *Store) fetchBase(ctx context.Context, ref string, o BuildOptions) (ocispec.Manifest, ocispec.Image, error) {
	var man ocispec.Manifest
	var cfg ocispec.Image
	desc, err := st.copyBase(ctx, ref, o)
	if err != nil {
		return man, cfg, err
	}
	if err := st.readJSON(ctx, desc, &man); err != nil {
		return man, cfg, fmt.Errorf("base image %s: %w", ref, err)
	}
	if err := st.readJSON(ctx, man.Config, &cfg); err != nil {
		return man, cfg, fmt.Errorf("config of base image %s: %w", ref, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(man.Layers) {
		return man, cfg, fmt.Errorf("base image %s lists %d layers but %d diff_ids: not an image a runtime can unpack", ref, len(man.Layers), len(cfg.RootFS.DiffIDs))
	}
	return man, cfg, nil
}

// copyBase fetches ref's manifest for this platform into the store, under
// a name of the store's own.
func (st *Store) copyBase(ctx context.Context, ref string, o BuildOptions) (ocispec.Descriptor, error) {
	if d, err := st.oci.Resolve(ctx, baseTag(ref)); err == nil {
		return d, nil
	}
	repo, err := newRepository(ref, o.Remote)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	opts := oras.DefaultCopyOptions
	opts.WithTargetPlatform(&ocispec.Platform{OS: "linux", Architecture: hostArch()})
	d, err := oras.Copy(ctx, repo, tagOf(repo), st.oci, baseTag(ref), opts)
	if err != nil {
		return d, &report.StepError{Op: "build", ID: ref, Err: fmt.Errorf("pull the base image %s: %w: %w", ref, err, ErrTransfer),
			Remedy: "make the application's image reachable from this host (log in to its registry), or name another with --base"}
	}
	return d, nil
}

// baseTag is the store's name for a base image: kept apart from the
// checkpoint images that `cryo image ls` shows.
func baseTag(ref string) string { return "cryo-base/" + digest.FromString(ref).Encoded()[:32] }
