package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
		hashAll([]*hashFile{chunked, plain})
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

func TestComputeDigestsFormat(t *testing.T) {
	dir := t.TempDir()
	big := randBytes(DigestChunkSize+3, 1)
	os.WriteFile(filepath.Join(dir, "pages-1.img"), big, 0o644)
	os.WriteFile(filepath.Join(dir, "core-1.img"), nil, 0o644)
	d, err := ComputeDigests(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"pages-1.img": fmt.Sprintf("sha256-chunked-16MiB:%d:%s", len(big), chunkedRef(big, DigestChunkSize)),
		"core-1.img":  "sha256-chunked-16MiB:0:" + chunkedRef(nil, DigestChunkSize),
	}
	if fmt.Sprint(d) != fmt.Sprint(want) {
		t.Fatalf("digests %v, want %v", d, want)
	}
	if DigestAlgorithm() != "sha256-chunked-16MiB" {
		t.Fatal(DigestAlgorithm())
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
	size := int64(2*DigestChunkSize + 1000)
	path := filepath.Join(dir, "pages-1.img")
	os.WriteFile(path, randBytes(int(size), 2), 0o644)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("inv"), 0o644)
	d, err := ComputeDigests(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := New("c")
	m.Digests = d
	if err := VerifyDigests(dir, m); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 1, DigestChunkSize - 1, DigestChunkSize, DigestChunkSize + 1,
		size / 2, 2*DigestChunkSize - 1, 2 * DigestChunkSize, size - 1} {
		flipAt(t, path, off)
		wantCorrupt(t, VerifyDigests(dir, m), "pages-1.img", "sha256 mismatch")
		flipAt(t, path, off)
	}
	if err := VerifyDigests(dir, m); err != nil {
		t.Fatal(err)
	}
	flipAt(t, filepath.Join(dir, "inventory.img"), 2)
	wantCorrupt(t, VerifyDigests(dir, m), "inventory.img", "sha256 mismatch")
}

func TestVerifySizeChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pages-1.img")
	data := randBytes(100000, 3)
	os.WriteFile(path, data, 0o644)
	d, err := ComputeDigests(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := &Manifest{Digests: d}
	os.WriteFile(path, data[:len(data)-1], 0o644)
	wantCorrupt(t, VerifyDigests(dir, m), "pages-1.img", "sha256 mismatch (the file has 99999 bytes, the manifest records 100000")
	os.WriteFile(path, append(data, 0), 0o644)
	wantCorrupt(t, VerifyDigests(dir, m), "pages-1.img", "sha256 mismatch (the file has 100001 bytes")
}

// A version 1 manifest (plain sha256 digests) still verifies, and a
// flipped byte in it is still found.
func TestVerifyVersion1(t *testing.T) {
	dir := t.TempDir()
	data := randBytes(DigestChunkSize+7, 4)
	os.WriteFile(filepath.Join(dir, "pages-1.img"), data, 0o644)
	os.WriteFile(filepath.Join(dir, "inventory.img"), []byte("inv"), 0o644)
	v1, _ := json.Marshal(map[string]any{"version": 1, "container_id": "c", "digests": map[string]string{
		"pages-1.img":   fmt.Sprintf("%x", sha256.Sum256(data)),
		"inventory.img": fmt.Sprintf("%x", sha256.Sum256([]byte("inv"))),
	}})
	os.WriteFile(filepath.Join(dir, ManifestName), v1, 0o644)
	m, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyDigests(dir, m); err != nil {
		t.Fatal(err)
	}
	flipAt(t, filepath.Join(dir, "pages-1.img"), DigestChunkSize+3)
	wantCorrupt(t, VerifyDigests(dir, m), "pages-1.img", "sha256 mismatch")
	// A mix of both kinds (a manifest edited by hand) is checked per file.
	flipAt(t, filepath.Join(dir, "pages-1.img"), DigestChunkSize+3)
	d, _ := ComputeDigests(dir)
	m.Digests["pages-1.img"] = d["pages-1.img"]
	if err := VerifyDigests(dir, m); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyBadDigestStrings(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "pages-1.img"), []byte("x"), 0o644)
	sum := chunkedRef([]byte("x"), DigestChunkSize)
	for _, s := range []string{
		"", "xyz", strings.ToUpper(sum),
		"sha512:1:" + sum, "sha256-chunked-0MiB:1:" + sum, "sha256-chunked-016MiB:1:" + sum,
		"sha256-chunked-16MiB:" + sum, "sha256-chunked-16MiB:-1:" + sum, "sha256-chunked-16MiB:1:" + sum[1:],
	} {
		err := VerifyDigests(dir, &Manifest{Digests: map[string]string{"pages-1.img": s}})
		var cf *CorruptFileError
		if !errors.As(err, &cf) || cf.File != "pages-1.img" || !strings.Contains(cf.Reason, "the manifest's digest") {
			t.Errorf("digest %q: %v", s, err)
		}
	}
	// Another chunk size is read: the algorithm name carries it.
	other := &hashFile{path: filepath.Join(dir, "pages-1.img"), size: 1, chunk: 1 << 20}
	hashAll([]*hashFile{other})
	if err := VerifyDigests(dir, &Manifest{Digests: map[string]string{"pages-1.img": other.digest()}}); err != nil || !strings.HasPrefix(other.digest(), "sha256-chunked-1MiB:1:") {
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
			hashAll([]*hashFile{f})
			if f.err == nil || !strings.Contains(f.err.Error(), c.want) {
				t.Errorf("size %d chunk %d: %v", c.size, chunk, f.err)
			}
		}
	}
}

func TestReadVersions(t *testing.T) {
	dir := t.TempDir()
	for v := 1; v <= FormatVersion; v++ {
		os.WriteFile(filepath.Join(dir, ManifestName), []byte(fmt.Sprintf(`{"version":%d}`, v)), 0o644)
		if _, err := Read(dir); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
	}
	if New("c").Version != 3 {
		t.Fatal("new manifests must be version 3: chunked digests and per-process GPUs")
	}
	os.WriteFile(filepath.Join(dir, ManifestName), []byte(fmt.Sprintf(`{"version":%d}`, FormatVersion+1)), 0o644)
	if _, err := Read(dir); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("future version: %v", err)
	}
}
