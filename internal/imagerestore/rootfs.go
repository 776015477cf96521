package imagerestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/continuity/fs"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	tarlimits "github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// The files of a container checkpoint that describe its rootfs changes.
const (
	// rootfsDiffName (ociimage.RootfsDiffName): the changed and added
	// files. containerd's kind and the kubelet's (containerd's CRI) hold
	// the rw layer (an OCI layer tar, deletions as whiteouts;
	// gzip-compressed in the kubelet's); Podman holds a plain tar of the
	// changed files.
	rootfsDiffName = ociimage.RootfsDiffName
	// deletedFilesName: Podman's and the kubelet's list of deleted paths
	// (a JSON array), which whiteouts stand for in a layer tar.
	deletedFilesName = "deleted.files"
)

// ApplyRootfs makes the container's root filesystem (mounted at rootfs) what
// it was at the checkpoint: the rootfs diff is applied as an image layer
// (containerd's archive.Apply: whiteouts delete, paths stay inside rootfs,
// owners and modes are kept), then the deleted files are removed. A
// checkpoint without either changes nothing. It returns the bytes written.
func (p *Prepared) ApplyRootfs(ctx context.Context, rootfs string) (int64, error) {
	n, err := applyDiff(ctx, filepath.Join(p.Dir, rootfsDiffName), rootfs, p.limits)
	if err != nil {
		return n, err
	}
	return n, removeDeleted(filepath.Join(p.Dir, deletedFilesName), rootfs)
}

func applyDiff(ctx context.Context, tarPath, rootfs string, lim tarlimits.Limits) (int64, error) {
	f, err := os.Open(tarPath)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// containerd's CRI plugin writes the container's rw layer blob as it
	// is in its content store: gzip-compressed, under the name .tar. Its
	// own CRI restore decompresses it the same way.
	r, err := compression.DecompressStream(f)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", rootfsDiffName, err)
	}
	defer r.Close()
	// Bounded as every tar of the checkpoint: the diff is the image's too.
	b := tarlimits.Bounded(ctx, r, tarlimits.Options{Limits: lim, Part: "the rootfs diff (" + rootfsDiffName + ")"})
	defer b.Close()
	n, err := archive.Apply(ctx, rootfs, b)
	if err != nil {
		return n, fmt.Errorf("apply %s to %s: %w", rootfsDiffName, rootfs, err)
	}
	return n, nil
}

// removeDeleted removes each listed path. Its parent is resolved inside
// rootfs, so that a symlink in the new rootfs cannot point the removal
// outside it; the last element is removed itself, a symlink included, not
// what it points to.
func removeDeleted(listPath, rootfs string) error {
	data, err := os.ReadFile(listPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var paths []string
	if err := json.Unmarshal(data, &paths); err != nil {
		return fmt.Errorf("%s is not a JSON list of paths: %w", deletedFilesName, err)
	}
	for _, p := range paths {
		clean := filepath.Join("/", p)
		if clean == "/" {
			continue // never the root itself
		}
		parent, err := fs.RootPath(rootfs, filepath.Dir(clean))
		if err != nil {
			return fmt.Errorf("%s: %s: %w", deletedFilesName, p, err)
		}
		target := filepath.Join(parent, filepath.Base(clean))
		if err := os.RemoveAll(target); err != nil {
			return fmt.Errorf("remove %s (listed in %s): %w", p, deletedFilesName, err)
		}
	}
	return nil
}
