package ociimage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// exportTarWith writes an export tar of fakeCheckpoint's files under
// checkpoint/, then extra entries, and returns its path.
func exportTarWith(t *testing.T, extra ...archive.Entry) string {
	t.Helper()
	files, err := listFiles(fakeCheckpoint(t), checkpointDir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := archive.Write(&buf, append(files, extra...)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "export.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileDigest(t *testing.T, p string) digest.Digest {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return digest.FromBytes(data)
}

// The extraction of an export hashes its pages files as it writes them,
// the last entry of a name counting; the build stores each as a blob with
// that digest, and the digest is the file's.
func TestExtractionSumsPagesFiles(t *testing.T) {
	other := filepath.Join(t.TempDir(), "other")
	os.WriteFile(other, bytes.Repeat([]byte{9}, 1<<20), 0o600) // pages-1.img's size, other bytes
	s, err := OpenSource(exportTarWith(t, archive.Entry{Name: "checkpoint/pages-1.img", Path: other}), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, name := range []string{"pages-1.img", "pages-2.img"} {
		p := filepath.Join(s.CRIU, name)
		if got, want := s.sums[p].digest, fileDigest(t, p); got != want {
			t.Errorf("%s: sum %s, want %s", name, got, want)
		}
	}
	if got := s.sums[filepath.Join(s.CRIU, "pages-1.img")].digest; got != fileDigest(t, other) {
		t.Errorf("pages-1.img given twice: the sum is %s, not the last entry's", got)
	}
	if _, ok := s.sums[filepath.Join(s.CRIU, "inventory.img")]; ok {
		t.Error("inventory.img was summed: only pages files are")
	}
	st, err := OpenStore(context.Background(), filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	descs, err := st.buildParts(context.Background(), s, BuildOptions{Ref: "localhost/t:1", SplitAt: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	blobs := 0
	for _, d := range descs {
		if d.MediaType != MediaTypeCheckpointPages {
			continue
		}
		blobs++
		if got := fileDigest(t, st.blobPath(d)); got != d.Digest {
			t.Errorf("pages blob %s holds bytes of digest %s", d.Digest, got)
		}
	}
	if blobs != 2 {
		t.Errorf("%d pages blobs, want 2", blobs)
	}
}

// A build takes the extraction's sum as it is, without reading the file
// again, only for the very file it was taken of: the same inode, reached
// through the hard link into the store. A sum of any other file is
// ignored and the file hashed.
func TestBuildPagesBlobTrustsOnlyItsFile(t *testing.T) {
	s, err := OpenSource(exportTarWith(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := filepath.Join(s.CRIU, "pages-2.img")
	want := fileDigest(t, p)
	marked := digest.FromString("the extraction's word")
	plan := layerPlan{Part: PartPages, Entries: []archive.Entry{{Name: "checkpoint/pages-2.img", Path: p}}}
	for _, c := range []struct {
		name  string
		ino   func(uint64) uint64
		owned bool
		want  digest.Digest
	}{
		{"its own file", func(i uint64) uint64 { return i }, true, marked},
		{"another inode", func(i uint64) uint64 { return i + 1 }, true, want},
		{"a layout not cryo's", func(i uint64) uint64 { return i }, false, want},
	} {
		st, err := OpenStore(context.Background(), filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		sum := s.sums[p]
		sum.digest, sum.ino = marked, c.ino(sum.ino)
		d, err := st.buildPagesBlob(plan, nil, c.owned, map[string]fileSum{p: sum})
		if err != nil {
			t.Fatal(err)
		}
		if d.Digest != c.want {
			t.Errorf("%s: blob digest %s, want %s", c.name, d.Digest, c.want)
		}
	}
}

// The verifier that hashes beside its reader refuses what oras-go's
// refuses: a blob cut short, one longer than its size, other bytes; and
// passes the blob itself.
func TestBlobVerifier(t *testing.T) {
	data := bytes.Repeat([]byte("blob "), 1<<19) // several of its buffers
	d := ocispec.Descriptor{Digest: digest.FromBytes(data), Size: int64(len(data))}
	other := bytes.Clone(data)
	other[len(other)/2] ^= 1
	for name, c := range map[string]struct {
		blob []byte
		want error
	}{
		"intact":    {data, nil},
		"truncated": {data[:len(data)-1], io.ErrUnexpectedEOF},
		"trailing":  {append(bytes.Clone(data), 'x'), content.ErrTrailingData},
		"changed":   {other, content.ErrMismatchedDigest},
	} {
		v := newBlobVerifier(io.NopCloser(bytes.NewReader(c.blob)), d)
		_, err := io.Copy(io.Discard, v)
		if err == nil {
			err = v.Verify()
		}
		v.Close()
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}
