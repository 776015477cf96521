package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chunkedRef is the chunked digest by its definition, in one pass.
func chunkedRef(data []byte, chunk int) string {
	top := sha256.New()
	for off := 0; off == 0 || off < len(data); off += chunk {
		c := sha256.Sum256(data[off:min(off+chunk, len(data))])
		top.Write(c[:])
	}
	return hex.EncodeToString(top.Sum(nil))
}

func randBytes(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func TestChunkedDigestDefinition(t *testing.T) {
	dir := t.TempDir()
	const chunk = 4096
	for _, n := range []int{0, 1, chunk - 1, chunk, chunk + 1, 3*chunk + 5, 64 * chunk} {
		data := randBytes(n, int64(n))
		path := filepath.Join(dir, fmt.Sprint(n))
		os.WriteFile(path, data, 0o644)
		chunked := &hashFile{path: path, size: int64(n), chunk: chunk}
		plain := &hashFile{path: path, size: int64(n)}
		hashAll([]*hashFile{chunked, plain}, nil)
		if chunked.err != nil || plain.err != nil {
			t.Fatalf("%d bytes: %v %v", n, chunked.err, plain.err)
		}
		if got, want := chunked.sum(), chunkedRef(data, chunk); got != want {
			t.Errorf("%d bytes: chunked %s, want %s", n, got, want)
		}
		if got, want := plain.sum(), fmt.Sprintf("%x", sha256.Sum256(data)); got != want {
			t.Errorf("%d bytes: plain %s, want %s", n, got, want)
		}
	}
}

func TestFilesFormat(t *testing.T) {
	dir := t.TempDir()
	big := randBytes(ChunkSize+3, 1)
	os.WriteFile(filepath.Join(dir, "pages-1.img"), big, 0o644)
	os.WriteFile(filepath.Join(dir, "core-1.img"), nil, 0o644)
	d, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"pages-1.img": fmt.Sprintf("sha256-chunked-16MiB:%d:%s", len(big), chunkedRef(big, ChunkSize)),
		"core-1.img":  "sha256-chunked-16MiB:0:" + chunkedRef(nil, ChunkSize),
	}
	if fmt.Sprint(d) != fmt.Sprint(want) {
		t.Fatalf("digests %v, want %v", d, want)
	}
	if chunkedName(ChunkSize) != "sha256-chunked-16MiB" {
		t.Fatal(chunkedName(ChunkSize))
	}
}

func TestFilesAndVerify(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) { os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644) }
	write("pages-1.img", "pages")
	write("inventory.img", "inv")
	write("criu-dump.log", "log")
	d, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 2 {
		t.Fatalf("digests cover %v, want the two images only", d)
	}
	if err := Verify(dir, nil); !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrIncomplete) {
		t.Fatalf("no digests must be corrupt and incomplete: %v", err)
	}
	write("criu-restore.log", "written by a restore")
	if err := Verify(dir, d); err != nil {
		t.Fatal(err)
	}
	write("pages-1.img", "pagez")
	err = Verify(dir, d)
	var cf *CorruptFileError
	if !errors.As(err, &cf) || cf.File != "pages-1.img" || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped byte: %v", err)
	}
	want := "checkpoint image file pages-1.img is corrupt: sha256 mismatch"
	if got := err.Error(); len(got) < len(want) || got[:len(want)] != want {
		t.Fatalf("message %q", got)
	}
	write("pages-1.img", "pages")
	write("pages-2.img", "extra")
	if err := Verify(dir, d); !errors.As(err, &cf) || cf.File != "pages-2.img" {
		t.Fatalf("uncovered image: %v", err)
	}
	os.Remove(filepath.Join(dir, "pages-2.img"))
	os.Remove(filepath.Join(dir, "inventory.img"))
	if err := Verify(dir, d); !errors.As(err, &cf) || cf.Reason != "missing" {
		t.Fatalf("missing image: %v", err)
	}
}

// flipAt inverts the byte at off in place.
func flipAt(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func wantCorrupt(t *testing.T, err error, file, reason string) {
	t.Helper()
	var cf *CorruptFileError
	if !errors.As(err, &cf) || cf.File != file || !errors.Is(err, ErrCorrupt) || !strings.Contains(cf.Reason, reason) {
		t.Fatalf("want %s corrupt (%s), got %v", file, reason, err)
	}
	prefix := "checkpoint image file " + file + " is corrupt: " + reason
	if reason == "sha256 mismatch" && !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("message %q", err)
	}
	if !strings.Contains(err.Error(), "remedy:") {
		t.Fatalf("message %q has no remedy", err)
	}
}

// A flipped byte anywhere (chunk edges included) is found and named.
func TestVerifyFlippedByteAnywhere(t *testing.T) {
	dir := t.TempDir()
	size := int64(2*ChunkSize + 1000)
	path := filepath.Join(dir, "pages-1.img")
	os.WriteFile(path, randBytes(int(size), 2), 0o644)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("inv"), 0o644)
	d, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir, d); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1,
		size / 2, 2*ChunkSize - 1, 2 * ChunkSize, size - 1} {
		flipAt(t, path, off)
		wantCorrupt(t, Verify(dir, d), "pages-1.img", "sha256 mismatch")
		flipAt(t, path, off)
	}
	if err := Verify(dir, d); err != nil {
		t.Fatal(err)
	}
	flipAt(t, filepath.Join(dir, "inventory.img"), 2)
	wantCorrupt(t, Verify(dir, d), "inventory.img", "sha256 mismatch")
}

func TestVerifySizeChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pages-1.img")
	data := randBytes(100000, 3)
	os.WriteFile(path, data, 0o644)
	d, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, data[:len(data)-1], 0o644)
	wantCorrupt(t, Verify(dir, d), "pages-1.img", "sha256 mismatch (the file has 99999 bytes, the manifest records 100000")
	os.WriteFile(path, append(data, 0), 0o644)
	wantCorrupt(t, Verify(dir, d), "pages-1.img", "sha256 mismatch (the file has 100001 bytes")
}

// The plain sha256 digests of a version 1 manifest still verify, and a
// flipped byte is still found.
func TestVerifyVersion1(t *testing.T) {
	dir := t.TempDir()
	data := randBytes(ChunkSize+7, 4)
	os.WriteFile(filepath.Join(dir, "pages-1.img"), data, 0o644)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("inv"), 0o644)
	v1 := map[string]string{
		"pages-1.img":   fmt.Sprintf("%x", sha256.Sum256(data)),
		"inventory.img": fmt.Sprintf("%x", sha256.Sum256([]byte("inv"))),
	}
	if err := Verify(dir, v1); err != nil {
		t.Fatal(err)
	}
	flipAt(t, filepath.Join(dir, "pages-1.img"), ChunkSize+3)
	wantCorrupt(t, Verify(dir, v1), "pages-1.img", "sha256 mismatch")
	// A mix of both kinds (a manifest edited by hand) is checked per file.
	flipAt(t, filepath.Join(dir, "pages-1.img"), ChunkSize+3)
	d, _ := Files(dir)
	v1["pages-1.img"] = d["pages-1.img"]
	if err := Verify(dir, v1); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyBadDigestStrings(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("x"), 0o644)
	sum := chunkedRef([]byte("x"), ChunkSize)
	for _, s := range []string{
		"", "xyz", strings.ToUpper(sum),
		"sha512:1:" + sum, "sha256-chunked-0MiB:1:" + sum, "sha256-chunked-016MiB:1:" + sum,
		"sha256-chunked-16MiB:" + sum, "sha256-chunked-16MiB:-1:" + sum, "sha256-chunked-16MiB:1:" + sum[1:],
	} {
		err := Verify(dir, map[string]string{"pages-1.img": s})
		var cf *CorruptFileError
		if !errors.As(err, &cf) || cf.File != "pages-1.img" || !strings.Contains(cf.Reason, "the manifest's digest") {
			t.Errorf("digest %q: %v", s, err)
		}
	}
	// Another chunk size is read: the algorithm name carries it.
	other := &hashFile{path: filepath.Join(dir, "pages-1.img"), size: 1, chunk: 1 << 20}
	hashAll([]*hashFile{other}, nil)
	if err := Verify(dir, map[string]string{"pages-1.img": other.digest()}); err != nil || !strings.HasPrefix(other.digest(), "sha256-chunked-1MiB:1:") {
		t.Fatalf("%s: %v", other.digest(), err)
	}
}

// A file that shrinks or grows between the stat and the read is an error.
func TestHashSizeRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, randBytes(10000, 5), 0o644)
	for _, c := range []struct {
		size int64
		want string
	}{{10010, "shrank"}, {9990, "grew"}} {
		for _, chunk := range []int64{0, 4096} {
			f := &hashFile{path: path, size: c.size, chunk: chunk}
			hashAll([]*hashFile{f}, nil)
			if f.err == nil || !strings.Contains(f.err.Error(), c.want) {
				t.Errorf("size %d chunk %d: %v", c.size, chunk, f.err)
			}
		}
	}
}
