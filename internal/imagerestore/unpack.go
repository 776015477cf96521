package imagerestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/progress"
)

// UnpackOptions says where a fetched image is unpacked, and how.
type UnpackOptions struct {
	// Dir is the caller's work directory (it must not exist or be
	// empty): kept afterwards, Prepared.Remove leaves it. "": a new one
	// under Base (NewWorkDir), which Prepared.Remove deletes.
	Dir  string
	Base string
	// Decrypt holds the keys of an encrypted image; nil: none.
	Decrypt *ociimage.DecryptOptions
	// Progress draws the extraction and the verification; nil: silent.
	Progress *progress.Renderer
	// Limits bound every tar of the image; zero: the defaults.
	Limits archive.Limits
}

// Unpack unpacks the image into the work directory, verified (every layer
// against its digest, every CRIU file against cryo's manifest), then
// checks that what was unpacked is the image Fetch checked: the store is
// shared, and its name could have been moved between the check and the
// unpack. On failure nothing of the unpack is left, except in a caller's
// directory that was not empty (the store refuses to unpack into it).
func (f *Fetched) Unpack(ctx context.Context, o UnpackOptions) (*Prepared, error) {
	p := &Prepared{Ref: f.ref, Kind: f.Image.Kind(), Digest: f.Image.Desc.Digest.String(), Pulled: f.Pulled, name: f.name, keep: o.Dir != "", limits: o.Limits}
	var err error
	if p.Dir, err = o.workDir(); err != nil {
		return nil, fail(StepWorkDir, err)
	}
	im, err := f.st.UnpackWith(ctx, f.name, p.Dir, ociimage.UnpackOptions{Decrypt: o.Decrypt, Progress: o.Progress, Limits: o.Limits})
	if err != nil {
		// The store has removed what it unpacked; a directory of ours goes
		// too.
		p.Remove()
		return nil, fail(StepUnpack, leftError(err, p.Dir))
	}
	if err := f.checkUnpacked(im, p.Dir); err != nil {
		os.RemoveAll(p.Dir) // what was unpacked is not what was checked
		return nil, err
	}
	return p, nil
}

// workDir is the caller's directory, else a new one.
func (o UnpackOptions) workDir() (string, error) {
	if o.Dir != "" {
		return o.Dir, nil
	}
	return NewWorkDir(o.Base)
}

// checkUnpacked refuses an unpacked image other than the one loaded (and
// pinned), and, for a container's restore, one without a container spec.
func (f *Fetched) checkUnpacked(im *ociimage.Image, dir string) error {
	if im.Desc.Digest != f.Image.Desc.Digest {
		return fail(StepUnpack, fmt.Errorf("the image store holds %s under %s: %w", im.Desc.Digest, f.ref, ErrDigestMismatch))
	}
	if !f.spec {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, specDumpName)); err != nil {
		return fail(StepContents, fmt.Errorf("%s holds no %s: %w", f.ref, specDumpName, ErrNotContainerCheckpoint))
	}
	return nil
}

// specDumpName is the container's spec that every container checkpoint
// carries (Podman, CRI, cryo's containerd kind); a bare process tree's has
// none.
const specDumpName = ociimage.SpecDumpName

// ErrWorkDirLeft: a failed unpack could not remove its work directory,
// which holds the checkpoint's memory.
var ErrWorkDirLeft = errors.New("the work directory of the unpack is left")

// leftError is err, also saying so when dir is still there after a failed
// unpack: the outcome of a refusal says only what was checked.
func leftError(err error, dir string) error {
	if _, serr := os.Lstat(dir); serr != nil {
		return err
	}
	return fmt.Errorf("%w (%w: %s, remove it by hand)", err, ErrWorkDirLeft, dir)
}
