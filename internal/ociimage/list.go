package ociimage

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// ImageInfo is one image of the store as `cryo image ls` shows it, read
// from its manifest and config only (no layer).
type ImageInfo struct {
	Ref  string `json:"ref"`
	Kind Kind   `json:"kind,omitempty"`
	Name string `json:"name,omitempty"`
	// Size is the image's bytes in the store (config and layers, compressed);
	// RawSize the checkpoint's own (cryo's size.total annotation), 0 when
	// the image does not record it (an image cryo did not build).
	Size    int64     `json:"size"`
	RawSize int64     `json:"raw_size,omitempty"`
	Created time.Time `json:"created,omitzero"`
	// GPUCount and GPUModel are the GPUs a restore needs; GPUsUnknown is
	// set when the manifest cannot say (see Summary.GPUsUnknown).
	GPUCount    int    `json:"gpu_count"`
	GPUModel    string `json:"gpu_model,omitempty"`
	GPUsUnknown string `json:"gpus_unknown,omitempty"`
	Digest      string `json:"digest"`
	Encrypted   bool   `json:"encrypted"`
	// Error: the tag's manifest or config could not be read; the other
	// images are listed all the same.
	Error string `json:"error,omitempty"`
}

// GPUs renders the GPU needs for a table: "2× NVIDIA H100", "none" or
// "unknown".
func (i ImageInfo) GPUs() string {
	switch {
	case i.GPUsUnknown != "":
		return "unknown"
	case i.GPUCount == 0:
		return "none"
	}
	return fmt.Sprintf("%d× %s", i.GPUCount, i.GPUModel)
}

// ListImages describes every tagged image of the store, in reference order.
func (st *Store) ListImages(ctx context.Context) ([]ImageInfo, error) {
	refs, err := st.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list image store %s: %w", st.Root, err)
	}
	sort.Strings(refs)
	out := make([]ImageInfo, 0, len(refs))
	for _, ref := range refs {
		out = append(out, st.imageInfo(ctx, ref))
	}
	return out, nil
}

// Info describes one image of the store as ListImages does: what `cryo
// image build|push|pull --json` print of the image they moved.
func (st *Store) Info(ctx context.Context, ref string) ImageInfo { return st.imageInfo(ctx, ref) }

func (st *Store) imageInfo(ctx context.Context, ref string) ImageInfo {
	im, err := st.LoadImage(ctx, ref)
	if err != nil {
		info := ImageInfo{Ref: ref, Error: err.Error()}
		if d, rerr := st.Resolve(ctx, ref); rerr == nil {
			info.Digest = d.Digest.String()
		}
		return info
	}
	sum := FromManifest(im.Manifest)
	info := ImageInfo{Ref: ref, Kind: sum.Kind, Name: sum.Name, Size: totalSize(im.Manifest) + im.Desc.Size,
		RawSize: sum.Sizes.Total, Created: sum.Created, GPUCount: len(sum.GPUs), GPUsUnknown: sum.GPUsUnknown,
		Digest: im.Desc.Digest.String(), Encrypted: sum.Encrypted}
	if len(sum.GPUs) > 0 {
		info.GPUModel = sum.GPUs[0].Name
	}
	if info.Created.IsZero() && im.Config.Created != nil {
		info.Created = im.Config.Created.UTC()
	}
	return info
}
