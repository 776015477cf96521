package ociimage

import (
	"context"
	"io"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// OpenArchive opens a checkpoint archive for a restore (`cryo image
// export`, `podman container checkpoint --export`, `ctr image export`):
// extracted into a private directory under tmp, within lim (the unpack
// bounds of an image restore: entries, depth, names), stopping when ctx
// ends. Close removes the extracted copy.
func OpenArchive(ctx context.Context, path, tmp string, lim archive.Limits) (*Source, error) {
	return openExportTarWith(path, tmp, func(r io.Reader, dir string) error {
		return archive.ExtractWith(ctx, r, dir, archive.Options{Limits: lim, Part: path})
	})
}
