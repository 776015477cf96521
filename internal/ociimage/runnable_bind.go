package ociimage

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	ctrdcontent "github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// A runnable image's config covers its checkpoint. A runtime names an
// image by its config's digest (the image ID), and containerd's CRI hands
// a container whichever of the image ID's references sorts first; so two
// manifests that share a config must not carry two checkpoints, or a pod
// pinned to one manifest restores the other's memory. The config's label
// LabelParts is the digest of everything the restore reads from the
// manifest besides the config: every layer descriptor in order (the
// checkpoint parts with their uncompressed digests, the changes' layer,
// the application's layers) and the manifest's annotations (kind, sizes,
// layout). Two different checkpoints then never share an image ID, and a
// manifest that borrows a victim's config with parts of its own fails the
// check below before anything is read.
const LabelParts = annPrefix + "parts"

var (
	// ErrPartsUnbound: a runnable image without LabelParts (built by a
	// cryo before the label): its config does not say which checkpoint
	// it carries.
	ErrPartsUnbound = report.Sentinel("the image's config does not name its checkpoint parts", errdefs.ErrFailedPrecondition)
	// ErrPartsMismatch: the manifest's parts or annotations are not
	// those its config names.
	ErrPartsMismatch = report.Sentinel("the image's checkpoint parts are not those its config names", errdefs.ErrFailedPrecondition)
)

// RemedyParts is what to do about either error.
const RemedyParts = "rebuild the image with this cryo (`cryo image build --runnable`), push it and name the new image"

// boundLayer is what LabelParts covers of one layer descriptor.
type boundLayer struct {
	MediaType   string            `json:"mediaType"`
	Digest      digest.Digest     `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PartsDigest is LabelParts' value for a manifest of these layers and
// annotations: the digest of their JSON (encoding/json sorts map keys,
// so the encoding is canonical). Anyone can compute it: the label binds
// a config to one checkpoint, it proves nothing about who built it.
func PartsDigest(layers []ocispec.Descriptor, ann map[string]string) digest.Digest {
	bound := struct {
		Layers      []boundLayer      `json:"layers"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}{Annotations: ann}
	for _, l := range layers {
		bound.Layers = append(bound.Layers, boundLayer{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size, Annotations: l.Annotations})
	}
	data, err := json.Marshal(bound)
	if err != nil {
		panic(err) // strings, numbers and maps of strings always encode
	}
	return digest.FromBytes(data)
}

// bindParts is cfg with LabelParts naming layers and ann.
func bindParts(cfg ocispec.Image, layers []ocispec.Descriptor, ann map[string]string) ocispec.Image {
	cfg.Config.Labels = maps.Clone(cfg.Config.Labels)
	if cfg.Config.Labels == nil {
		cfg.Config.Labels = map[string]string{}
	}
	cfg.Config.Labels[LabelParts] = PartsDigest(layers, ann).String()
	return cfg
}

// VerifyParts checks that man carries exactly the checkpoint its config
// cfg names. An image without the label passes only when legacy is true:
// the CLI reads an image by the reference it was stored under, which no
// other manifest can share, while a runtime picks a manifest by config.
func VerifyParts(cfg ocispec.Image, man ocispec.Manifest, legacy bool) error {
	want, ok := cfg.Config.Labels[LabelParts]
	if !ok {
		if legacy {
			return nil
		}
		return fmt.Errorf("no %s label (built by a cryo older than the label): %w", LabelParts, ErrPartsUnbound)
	}
	if got := PartsDigest(man.Layers, man.Annotations); got.String() != want {
		return fmt.Errorf("the config names %s, the manifest's parts and annotations are %s: %w", want, got, ErrPartsMismatch)
	}
	return nil
}

// maxConfigSize bounds a config read from a content store.
const maxConfigSize = 4 << 20

// ReadConfig reads man's config from a content provider (containerd's
// content store), checked against its digest.
func ReadConfig(ctx context.Context, p ctrdcontent.Provider, man ocispec.Manifest) (ocispec.Image, error) {
	var cfg ocispec.Image
	if man.Config.Size > maxConfigSize {
		return cfg, fmt.Errorf("config %s: %d bytes is too big for a config: %w", man.Config.Digest, man.Config.Size, ErrIntegrity)
	}
	data, err := ctrdcontent.ReadBlob(ctx, p, man.Config)
	if err != nil {
		return cfg, fmt.Errorf("read config %s: %w", man.Config.Digest, err)
	}
	if digest.FromBytes(data) != man.Config.Digest {
		return cfg, fmt.Errorf("config %s does not match its digest: %w", man.Config.Digest, ErrIntegrity)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", man.Config.Digest, err)
	}
	return cfg, nil
}

// verifyPartsIn is VerifyParts for a manifest in a content provider, with
// no leniency: the shim's path, where containerd chose the manifest.
func verifyPartsIn(ctx context.Context, p ctrdcontent.Provider, man ocispec.Manifest) error {
	cfg, err := ReadConfig(ctx, p, man)
	if err != nil {
		return err
	}
	return VerifyParts(cfg, man, false)
}
