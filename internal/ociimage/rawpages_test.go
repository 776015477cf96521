package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	ctrdcontent "github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// pagesStore is a containerd local content store (the store containerd
// itself keeps on a node) under root holding a runnable image of the
// checkpoint src in the pages-blob layout: every file but pages-2.img in a
// compressed part, pages-2.img as a blob of its own.
type pagesStore struct {
	root string
	cs   ctrdcontent.Store
	man  ocispec.Manifest
	blob ocispec.Descriptor
}

func newPagesStore(t *testing.T, src string) *pagesStore {
	t.Helper()
	ps := &pagesStore{root: t.TempDir()}
	var err error
	if ps.cs, err = local.NewStore(ps.root); err != nil {
		t.Fatal(err)
	}
	base := ps.write(t, MediaTypeCheckpointPart, tarOf(t, src, "pages-2.img"))
	data, err := os.ReadFile(filepath.Join(src, "pages-2.img"))
	if err != nil {
		t.Fatal(err)
	}
	ps.blob = ps.write(t, MediaTypeCheckpointPages, data)
	ps.blob.Annotations = map[string]string{AnnLayerPart: PartPages, AnnPartFile: "checkpoint/pages-2.img"}
	ps.man = ocispec.Manifest{Layers: []ocispec.Descriptor{base, ps.blob}, Annotations: map[string]string{AnnLayout: LayoutRunnable}}
	ps.man = bindConfig(t, ps.cs, ps.man)
	return ps
}

// blobOf is a compressed part and its uncompressed digest.
type blobOf struct {
	data []byte
	diff digest.Digest
}

// tarOf is a zstd tar of src's files under checkpoint/, but skip.
func tarOf(t *testing.T, src, skip string) blobOf {
	t.Helper()
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out)
	plain := digest.SHA256.Digester()
	tw := tar.NewWriter(ioMulti(zw, plain))
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		if e.Name() == skip {
			continue
		}
		data, _ := os.ReadFile(filepath.Join(src, e.Name()))
		tw.WriteHeader(&tar.Header{Name: "checkpoint/" + e.Name(), Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(data))})
		tw.Write(data)
	}
	tw.Close()
	zw.Close()
	return blobOf{data: out.Bytes(), diff: plain.Digest()}
}

// write stores a blob; for a part, data is a blobOf.
func (ps *pagesStore) write(t *testing.T, mt string, v any) ocispec.Descriptor {
	t.Helper()
	var data []byte
	ann := map[string]string{}
	switch b := v.(type) {
	case blobOf:
		data, ann[AnnPartDiffID], ann[AnnLayerPart] = b.data, b.diff.String(), PartBase
	case []byte:
		data = b
	}
	d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(data), Size: int64(len(data)), Annotations: ann}
	if err := ctrdcontent.WriteBlob(context.Background(), ps.cs, d.Digest.String(), bytes.NewReader(data), d); err != nil {
		t.Fatal(err)
	}
	return d
}

func (ps *pagesStore) blobPath() string {
	return filepath.Join(ps.root, "blobs", "sha256", ps.blob.Digest.Encoded())
}

func (ps *pagesStore) unpack(t *testing.T, blobDir string) (string, PartsStats, error) {
	return ps.unpackWith(t, blobDir, filedigest.Records{})
}

func (ps *pagesStore) unpackWith(t *testing.T, blobDir string, recs filedigest.Records) (string, PartsStats, error) {
	t.Helper()
	dir := t.TempDir()
	var stats PartsStats
	err := UnpackPartsFrom(context.Background(), ps.cs, ps.man, dir, recs, PartsOptions{BlobDir: blobDir, Stats: &stats})
	return dir, stats, err
}

func ioMulti(zw *zstd.Encoder, d digest.Digester) *multiWriter { return &multiWriter{zw, d} }

type multiWriter struct {
	zw *zstd.Encoder
	d  digest.Digester
}

func (m *multiWriter) Write(p []byte) (int, error) {
	m.d.Hash().Write(p)
	return m.zw.Write(p)
}

// The restore gives CRIU the content store's own file of a pages blob,
// hard-linked (no second copy of the memory on the node's disk), read-only
// as containerd keeps it; every CRIU file still matches cryo's manifest.
func TestUnpackPartsLinksPagesBlob(t *testing.T) {
	ps := newPagesStore(t, fakeCheckpoint(t))
	dir, stats, err := ps.unpack(t, filepath.Join(ps.root, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.Stat(filepath.Join(CRIUDir(dir), "pages-2.img"))
	if err != nil {
		t.Fatal(err)
	}
	blob, err := os.Stat(ps.blobPath())
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(got, blob) {
		t.Fatal("pages-2.img is not the content store's blob: it was copied")
	}
	if got.Mode().Perm()&0o222 != 0 {
		t.Errorf("the linked pages file is writable: %v", got.Mode())
	}
	if stats.Linked != ps.blob.Size || stats.Copied != 0 || stats.Extracted == 0 {
		t.Errorf("stats %+v, want %d bytes linked, none copied, the base part extracted", stats, ps.blob.Size)
	}
	if _, err := os.Stat(filepath.Join(CRIUDir(dir), "inventory.img")); err != nil {
		t.Error(err)
	}
}

// Without the store's directory (containerd's root unknown) the blob is
// copied, verified against its digest: the same bytes, another file.
func TestUnpackPartsCopiesPagesBlob(t *testing.T) {
	ps := newPagesStore(t, fakeCheckpoint(t))
	dir, stats, err := ps.unpack(t, "")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.Stat(filepath.Join(CRIUDir(dir), "pages-2.img"))
	blob, _ := os.Stat(ps.blobPath())
	if got == nil || os.SameFile(got, blob) {
		t.Fatalf("pages-2.img %v: want a copy of the blob", got)
	}
	if stats.Copied != ps.blob.Size || stats.Linked != 0 {
		t.Errorf("stats %+v, want %d bytes copied", stats, ps.blob.Size)
	}
	a, _ := os.ReadFile(filepath.Join(CRIUDir(dir), "pages-2.img"))
	b, _ := os.ReadFile(ps.blobPath())
	if !bytes.Equal(a, b) {
		t.Error("the copy differs from the blob")
	}
}

// tamper changes a byte of the stored blob, keeping its size and its
// read-only mode.
func (ps *pagesStore) tamper(t *testing.T, mode os.FileMode) {
	t.Helper()
	p := ps.blobPath()
	os.Chmod(p, 0o600)
	data, _ := os.ReadFile(p)
	data[len(data)-1] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
}

// A blob changed in the store after containerd checked it (which takes
// root: the file is root's and read-only) is refused when copied, by the
// blob's digest, and, under CRYO_VERIFY=full, when linked, by cryo's
// manifest. By default a linked blob is containerd's verified file, as
// for containerd's own unpack, and its bytes are not read again.
func TestUnpackPartsRefusesTamperedPagesBlob(t *testing.T) {
	ps := newPagesStore(t, fakeCheckpoint(t))
	ps.tamper(t, 0o444)
	_, _, err := ps.unpackWith(t, filepath.Join(ps.root, "blobs"), filedigest.Records{Full: true})
	var corrupt *filedigest.CorruptFileError
	if !errors.As(err, &corrupt) || corrupt.File != "pages-2.img" {
		t.Fatalf("linked, full verification: %v, want pages-2.img's manifest digest to fail", err)
	}
	if _, _, err := ps.unpack(t, ""); !errors.Is(err, ErrIntegrity) {
		t.Fatalf("copied: %v, want %v", err, ErrIntegrity)
	}
}

// The manifest's check does not read a pages blob again, linked or
// copied: it was verified against its digest as it was laid out. The
// other CRIU files are still hashed.
func TestUnpackPartsVouchesForPagesBlob(t *testing.T) {
	ps := newPagesStore(t, fakeCheckpoint(t))
	ps.tamper(t, 0o444)
	if _, stats, err := ps.unpack(t, filepath.Join(ps.root, "blobs")); err != nil || stats.Linked != ps.blob.Size {
		t.Fatalf("linked: %v (stats %+v), want the linked blob taken as containerd verified it", err, stats)
	}
}

// A blob that anyone can write is never linked: the restore would hand
// CRIU a file that can change under it. It is copied, verified.
func TestUnpackPartsCopiesWritableBlob(t *testing.T) {
	ps := newPagesStore(t, fakeCheckpoint(t))
	os.Chmod(ps.blobPath(), 0o644)
	_, stats, err := ps.unpack(t, filepath.Join(ps.root, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Linked != 0 || stats.Copied != ps.blob.Size {
		t.Fatalf("stats %+v: a writable blob was linked", stats)
	}
}

// A pages blob names only checkpoint/pages-N.img: not a path out of the
// work directory, not another CRIU file.
func TestUnpackPartsRefusesPagesBlobPath(t *testing.T) {
	for _, name := range []string{"../pages-2.img", "checkpoint/inventory.img", "checkpoint/../../x/pages-2.img", "/checkpoint/pages-2.img", ""} {
		ps := newPagesStore(t, fakeCheckpoint(t))
		ps.man.Layers[1].Annotations = map[string]string{AnnLayerPart: PartPages, AnnPartFile: name}
		ps.man = bindConfig(t, ps.cs, ps.man)
		if _, _, err := ps.unpack(t, filepath.Join(ps.root, "blobs")); !errors.Is(err, archive.ErrUnsafeEntry) {
			t.Errorf("%q: %v, want %v", name, err, archive.ErrUnsafeEntry)
		}
	}
}

// buildParts writes a big pages file as a blob that is the file (its
// digest the file's sha256), read-only in the store; CompressPages keeps
// the compressed parts of images built before.
func TestBuildPartsPagesBlob(t *testing.T) {
	src := fakeCheckpoint(t)
	s, err := OpenSource(src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, compress := range []bool{false, true} {
		st, err := OpenStore(context.Background(), filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		descs, err := st.buildParts(context.Background(), s, BuildOptions{Ref: "localhost/t:1", SplitAt: 1 << 20, CompressPages: compress})
		if err != nil {
			t.Fatal(err)
		}
		var blobs int
		for _, d := range descs {
			if d.MediaType != MediaTypeCheckpointPages {
				continue
			}
			blobs++
			name, err := partFile(d)
			data, _ := os.ReadFile(filepath.Join(src, filepath.Base(name)))
			if err != nil || d.Digest != digest.FromBytes(data) {
				t.Errorf("pages blob %v: want the file's digest and name", d)
			}
			if fi, err := os.Stat(st.blobPath(d)); err != nil || fi.Mode().Perm() != pagesBlobMode {
				t.Errorf("stored blob: %v %v, want mode %o", fi, err, pagesBlobMode)
			}
		}
		// fakeCheckpoint has two pages files of 1 and 2 MiB.
		if want := map[bool]int{false: 2, true: 0}[compress]; blobs != want {
			t.Errorf("compress %v: %d pages blobs, want %d", compress, blobs, want)
		}
	}
}

// A pages file of a layout cryo extracted itself becomes its blob by a
// hard link (the extraction was its one write); one of the caller's
// directory is copied, so that the store does not change with it.
func TestBuildPartsLinksOwnedLayout(t *testing.T) {
	for _, owned := range []bool{false, true} {
		src := fakeCheckpoint(t)
		s, err := OpenSource(src, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if owned {
			s.cleanup = func() {} // as openLaidOut and openExportTar mark theirs
		}
		st, err := OpenStore(context.Background(), filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		descs, err := st.buildParts(context.Background(), s, BuildOptions{Ref: "localhost/t:1", SplitAt: 2 << 20})
		if err != nil {
			t.Fatal(err)
		}
		blob, _ := os.Stat(st.blobPath(descs[len(descs)-1]))
		file, _ := os.Stat(filepath.Join(src, "pages-2.img"))
		if blob == nil || file == nil || os.SameFile(blob, file) != owned {
			t.Errorf("owned %v: the blob is the source file: %v", owned, !owned)
		}
	}
}

// A runnable image in cryo's own store (what `cryo image restore` reads)
// unpacks with its pages blob linked from the store, read-only, and
// exports with the blob as its file.
func TestStoreUnpackLinksPagesBlob(t *testing.T) {
	ctx := context.Background()
	src := fakeCheckpoint(t)
	s, err := OpenSource(src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(ctx, filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	ref := "localhost/runnable:1"
	parts, err := st.buildParts(ctx, s, BuildOptions{Ref: ref, SplitAt: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Summarize(s)
	if err != nil {
		t.Fatal(err)
	}
	ann := imageAnnotations(s, sum)
	ann[AnnLayout] = LayoutRunnable
	if _, err := st.commitManifest(ctx, ref, bindParts(ocispec.Image{}, parts, ann), parts, ann); err != nil {
		t.Fatal(err)
	}
	blob := parts[len(parts)-1]
	if blob.MediaType != MediaTypeCheckpointPages {
		t.Fatalf("last part %s, want a pages blob", blob.MediaType)
	}
	dir := filepath.Join(t.TempDir(), "work")
	if _, err := st.UnpackWith(ctx, ref, dir, UnpackOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.Stat(filepath.Join(CRIUDir(dir), "pages-2.img"))
	stored, _ := os.Stat(st.blobPath(blob))
	if got == nil || stored == nil || !os.SameFile(got, stored) || got.Mode().Perm() != pagesBlobMode {
		t.Fatalf("pages-2.img %v, store's blob %v: want the blob linked, mode %o", got, stored, pagesBlobMode)
	}
	var out bytes.Buffer
	if err := st.Export(ctx, ref, &out, nil); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(src, "pages-2.img"))
	tr := tar.NewReader(&out)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("the export has no checkpoint/pages-2.img: %v", err)
		}
		if hdr.Name == "checkpoint/pages-2.img" {
			data, _ := io.ReadAll(tr)
			if !bytes.Equal(data, want) {
				t.Fatal("the exported pages-2.img differs from the checkpoint's")
			}
			return
		}
	}
}

// An image built before pages blobs (by cryo at a2b78ea: every part a
// compressed tar, testdata/runnable-v1) still unpacks, from cryo's store
// and from containerd's content store, every CRIU file checked against
// its manifest.
func TestUnpackRunnableBuiltBeforePagesBlobs(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(root, os.DirFS("testdata/runnable-v1")); err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	ref := "localhost/runnable-v1:1"
	dir := filepath.Join(t.TempDir(), "work")
	im, err := st.UnpackWith(ctx, ref, dir, UnpackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(CRIUDir(dir), "pages-1.img")); err != nil || fi.Size() != 64<<10 {
		t.Fatalf("pages-1.img: %v %v", fi, err)
	}
	cs, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append([]ocispec.Descriptor{im.Manifest.Config}, im.Manifest.Layers...) {
		if d.MediaType == MediaTypeCheckpointPages {
			t.Fatalf("the old image has a pages blob: %v", d)
		}
		data, err := os.ReadFile(st.blobPath(d))
		if err != nil {
			t.Fatal(err)
		}
		if err := ctrdcontent.WriteBlob(ctx, cs, d.Digest.String(), bytes.NewReader(data), d); err != nil {
			t.Fatal(err)
		}
	}
	var stats PartsStats
	if err := UnpackPartsFrom(ctx, cs, im.Manifest, t.TempDir(), filedigest.Records{}, PartsOptions{Stats: &stats}); err != nil {
		t.Fatal(err)
	}
	if stats.Linked != 0 || stats.Extracted == 0 {
		t.Errorf("stats %+v: want every part extracted", stats)
	}
}

// Nothing of the unpack writes through a link: a second pages blob of the
// same name is refused, and a later compressed part naming the linked
// file replaces the name, leaving the content store's blob as it was.
func TestUnpackPartsNeverWritesThroughLink(t *testing.T) {
	src := fakeCheckpoint(t)
	ps := newPagesStore(t, src)
	ps.man.Layers = append(ps.man.Layers, ps.blob)
	ps.man = bindConfig(t, ps.cs, ps.man)
	if _, _, err := ps.unpack(t, filepath.Join(ps.root, "blobs")); err == nil {
		t.Error("two pages blobs of one name were accepted")
	}
	ps = newPagesStore(t, src)
	before, _ := os.ReadFile(ps.blobPath())
	other := t.TempDir() // a pages-2.img of other bytes
	os.WriteFile(filepath.Join(other, "pages-2.img"), bytes.Repeat([]byte{7}, len(before)), 0o600)
	over := ps.write(t, MediaTypeCheckpointPart, tarOf(t, other, ""))
	ps.man.Layers = append(ps.man.Layers, over)
	ps.man = bindConfig(t, ps.cs, ps.man)
	ps.unpack(t, filepath.Join(ps.root, "blobs")) // whatever the outcome
	if after, _ := os.ReadFile(ps.blobPath()); !bytes.Equal(before, after) {
		t.Error("the unpack wrote into the content store's blob")
	}
}

// hashed counts the bytes a verification hashes.
type hashed struct{ n int64 }

func (h *hashed) SetTotal(int64) {}
func (h *hashed) Add(n int64)    { h.n += n }

// A build verifies a checkpoint directory that cryo stamped (hashed on
// this host, unchanged since) without hashing it again; a layout cryo
// extracted itself is hashed every time and never stamped.
func TestBuildVerifiesStampedSourceOnce(t *testing.T) {
	st, err := OpenStore(context.Background(), filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	for _, owned := range []bool{false, true} {
		stamps := t.TempDir()
		st.Records = filedigest.Records{Dir: stamps}
		s, err := OpenSource(fakeCheckpoint(t), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if owned {
			s.cleanup = func() {}
		}
		var first, second hashed
		if err := st.verifySource(s, &first); err != nil {
			t.Fatal(err)
		}
		if err := st.verifySource(s, &second); err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(stamps)
		if first.n == 0 || (second.n == 0) == owned || (len(entries) == 0) != owned {
			t.Errorf("owned %v: hashed %d then %d bytes, %d stamps", owned, first.n, second.n, len(entries))
		}
	}
}
