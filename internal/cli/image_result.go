package cli

import (
	"github.com/cryo-gpu/cryo/internal/ociimage"
)

// imageResult is what `cryo image build|push|pull --json` print: the image
// as `cryo image ls --json` lists it (ref, kind, size, raw_size, created,
// gpu_count, gpu_model, digest, encrypted), and for a build its layers and
// compression ratio.
type imageResult struct {
	ociimage.ImageInfo
	Layers int     `json:"layers,omitempty"`
	Ratio  float64 `json:"ratio,omitempty"`
}

// removedImage is one entry of `cryo image rm --json`.
type removedImage struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest,omitempty"`
}
