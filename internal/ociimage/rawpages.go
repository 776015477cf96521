package ociimage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	ctrdcontent "github.com/containerd/containerd/v2/core/content"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
	"oras.land/oras-go/v2/content"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/progress"
)

// A runnable image carries each big CRIU pages file as a blob of its own,
// byte for byte the file: no tar, no compression. A content store keeps a
// blob as one read-only file named by its digest, so the restore gives
// CRIU that very file, hard-linked into the work directory, instead of a
// second full copy of the memory on the node's disk. The price is the
// registry bytes that compression would have saved: little, since the
// zero pages, which compressed best, are no longer in the pages files (see
// docs/benchmarks.md for the numbers). The small files stay in a
// compressed part.
const (
	// MediaTypeCheckpointPages is one CRIU pages file, as it is.
	MediaTypeCheckpointPages = "application/vnd.cryo.checkpoint.pages.v1"
	// AnnPartFile names the file a pages blob is, in the export layout
	// (checkpoint/pages-N.img).
	AnnPartFile = annPrefix + "part.file"
)

// pagesBlobMode is a pages blob's in cryo's store: private, and read-only,
// as containerd keeps every blob, so that a restore may link it.
const pagesBlobMode = 0o400

// isCheckpointBlob reports whether l is a runnable image's checkpoint
// part of either form: not a layer, never unpacked by a runtime.
func isCheckpointBlob(l ocispec.Descriptor) bool {
	return l.MediaType == MediaTypeCheckpointPart || l.MediaType == MediaTypeCheckpointPages
}

// partFile is the checked relative path a pages blob is laid out at:
// checkpoint/pages-N.img and nothing else, so that an image cannot name a
// path outside the work directory or over another CRIU file.
func partFile(l ocispec.Descriptor) (string, error) {
	name := l.Annotations[AnnPartFile]
	if path.Clean(name) != name || path.Dir(name) != checkpointDir || !isPages(path.Base(name)) {
		return "", fmt.Errorf("pages blob %s names file %q, not %s/pages-N.img: %w", l.Digest, name, checkpointDir, archive.ErrUnsafeEntry)
	}
	return name, nil
}

// buildPagesBlob stores the pages file of plan p as a blob, hashed on the
// way. A file of a layout cryo extracted itself (owned: a containerd
// checkpoint, an export tar) becomes the blob by a hard link, so that the
// extraction was its only write; a file of the caller's checkpoint
// directory is copied (a reflink where the file system can), since the
// store must not change when that directory does. A linked file whose
// digest the extraction took as it wrote it (sums) is not read again.
func (st *Store) buildPagesBlob(p layerPlan, t *progress.Task, owned bool, sums map[string]fileSum) (ocispec.Descriptor, error) {
	e := p.Entries[0]
	fail := func(err error) (ocispec.Descriptor, error) {
		return ocispec.Descriptor{}, fmt.Errorf("write pages blob %s: %w", e.Name, err)
	}
	tmp, err := st.pagesBlobFile(e.Path, owned, t)
	if tmp != "" {
		defer os.Remove(tmp)
	}
	if err != nil {
		return fail(err)
	}
	sum, ok := sums[e.Path]
	if ok = owned && ok && sum.describes(tmp); ok {
		t.Add(sum.size)
	} else {
		d, err := hashFile(tmp, t)
		if err != nil {
			return fail(err)
		}
		sum = fileSum{digest: d.Digest(), size: d.n}
	}
	desc := ocispec.Descriptor{MediaType: MediaTypeCheckpointPages, Digest: sum.digest, Size: sum.size,
		Annotations: map[string]string{AnnLayerPart: PartPages, AnnPartFile: path.Join(checkpointDir, path.Base(e.Name))}}
	if err := os.Chmod(tmp, pagesBlobMode); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, st.blobPath(desc)); err != nil {
		return fail(err)
	}
	return desc, nil
}

// pagesBlobFile puts the file src under a temporary name in the store's
// blob directory: linked when owned, else reflinked or copied.
func (st *Store) pagesBlobFile(src string, owned bool, t *progress.Task) (string, error) {
	if owned {
		name := filepath.Join(st.blobDir(), fmt.Sprintf(".build-%d-%s", os.Getpid(), filepath.Base(src)))
		os.Remove(name)
		if os.Link(src, name) == nil {
			return name, nil
		}
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	f, err := os.CreateTemp(st.blobDir(), ".build-*")
	if err != nil {
		return "", err
	}
	if unix.IoctlFileClone(int(f.Fd()), int(in.Fd())) != nil {
		_, err = io.Copy(f, in)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return f.Name(), err
}

// hashFile is the digest and size of file name; t counts the bytes.
func hashFile(name string, t *progress.Task) (*digestCounter, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := newDigestCounter()
	_, err = io.Copy(multi(d, t), f)
	return d, err
}

// ErrBlobNotLinkable: the blob's file cannot be given to CRIU as it is
// (another file system, or not the read-only file of that size); it is
// copied instead.
var ErrBlobNotLinkable = errors.New("the blob cannot be linked")

// linkBlob hard-links the content store's file of blob l to dst. Only a
// regular file of l's size that nobody can write is linked: CRIU only
// reads it, the container never sees the work directory, and the restore
// must not be able to change what the store holds. Its content is checked
// afterwards against cryo's manifest, as every CRIU file is; the store
// checked the blob's digest when it was written.
func linkBlob(blobDir string, l ocispec.Descriptor, dst string) error {
	if blobDir == "" {
		return ErrBlobNotLinkable
	}
	if err := l.Digest.Validate(); err != nil {
		return err
	}
	src := filepath.Join(blobDir, l.Digest.Algorithm().String(), l.Digest.Encoded())
	fi, err := os.Lstat(src)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != l.Size || fi.Mode().Perm()&0o222 != 0 {
		return fmt.Errorf("%s: %v: %w", src, err, ErrBlobNotLinkable)
	}
	if err := os.Link(src, dst); err != nil {
		return fmt.Errorf("%w: %w", err, ErrBlobNotLinkable)
	}
	return nil
}

// layPagesBlob lays pages blob l out under dir: linked from blobDir where
// it can be, else copied from what open gives, verified against l, within
// the budget; it reports whether it linked. The blob is opened first either way: the caller's store
// (containerd's, in the restore's namespace) must hold it, not merely the
// directory of every namespace's blobs.
func layPagesBlob(ctx context.Context, l ocispec.Descriptor, dir, blobDir string, open func() (io.ReadCloser, error), budget *archive.Budget) (bool, error) {
	name, err := partFile(l)
	if err != nil {
		return false, err
	}
	rc, err := open()
	if err != nil {
		return false, fmt.Errorf("pages blob %s is not in the content store (%v): %w", l.Digest, err, ErrIntegrity)
	}
	defer rc.Close()
	dst := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(dst), archive.DirMode); err != nil {
		return false, err
	}
	if err := linkBlob(blobDir, l, dst); err == nil || !errors.Is(err, ErrBlobNotLinkable) {
		return err == nil, err
	}
	if budget != nil {
		if l.Size > budget.Left {
			return false, layerErr(l, fmt.Errorf("%s: %d bytes over what %s allows: %w", name, l.Size, budget.Source, archive.ErrTooLarge))
		}
		budget.Left -= l.Size
	}
	return false, copyBlob(ctx, l, dst, rc)
}

// copyBlob copies blob l from r into a new file dst, verified.
func copyBlob(ctx context.Context, l ocispec.Descriptor, dst string, r io.Reader) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, archive.FileMode)
	if err != nil {
		return err
	}
	vr := content.NewVerifyReader(r, l)
	_, err = io.Copy(f, ctxReader{ctx, vr})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = vr.Verify()
	}
	if err != nil {
		return layerErr(l, err)
	}
	return nil
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// providerBlob opens blob l of a containerd content provider.
func providerBlob(ctx context.Context, p ctrdcontent.Provider, l ocispec.Descriptor) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) {
		ra, err := p.ReaderAt(ctx, l)
		if err != nil {
			return nil, err
		}
		return readAtCloser{blobStream(ra), ra}, nil
	}
}

// blobStreamBuffer is the size of each read of a content store's blob. The
// shim's store is containerd's over its API, where every read is a call:
// the decompressor's and io.Copy's small reads made a 1 GiB part cost
// 15 s on one H200; reads of this size cost what the bytes do.
const blobStreamBuffer = 4 << 20

// blobStream reads all of ra in large reads.
func blobStream(ra ctrdcontent.ReaderAt) io.Reader {
	return bufio.NewReaderSize(io.NewSectionReader(ra, 0, ra.Size()), blobStreamBuffer)
}

type readAtCloser struct {
	io.Reader
	io.Closer
}
