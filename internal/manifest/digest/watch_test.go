package digest

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// appendFile writes n bytes of seeded data to path in pieces, pausing
// between them, as CRIU writes a pages image.
func appendFile(t *testing.T, path string, seed int64, n, piece int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewSource(seed))
	buf := make([]byte, piece)
	for done := 0; done < n; done += piece {
		r.Read(buf)
		if _, err := f.Write(buf[:min(piece, n-done)]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestWatcherMatchesCompute: the digests of a watched dump equal
// those of a second pass, and the watcher did hash chunks during the dump.
func TestWatcherMatchesCompute(t *testing.T) {
	dir := t.TempDir()
	w := Watch(dir)
	appendFile(t, filepath.Join(dir, "pages-1.img"), 1, 3*ChunkSize+12345, 1<<20)
	appendFile(t, filepath.Join(dir, "pages-2.img"), 2, 2*ChunkSize, 4<<20)
	writeFileT(t, filepath.Join(dir, "core-1.img"), "core")
	writeFileT(t, filepath.Join(dir, "criu-dump.log"), "log")
	time.Sleep(3 * watchInterval)
	got, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	want, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(got) != 3 {
		t.Fatalf("got %d digests, want %d (3)", len(got), len(want))
	}
	for name, d := range want {
		if got[name] != d {
			t.Errorf("%s: watched %s, computed %s", name, got[name], d)
		}
	}
	if n := len(w.files["pages-1.img"].sums); n != 3 {
		t.Fatalf("the watcher hashed %d full chunks of pages-1.img during the dump, want 3", n)
	}
}

// TestWatcherReplacedFile: a pages image replaced by another file of
// the same name after some chunks were hashed is hashed again in full.
func TestWatcherReplacedFile(t *testing.T) {
	dir := t.TempDir()
	w := Watch(dir)
	path := filepath.Join(dir, "pages-1.img")
	appendFile(t, path, 1, 2*ChunkSize, 4<<20)
	time.Sleep(5 * watchInterval)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, 7, 2*ChunkSize+1, 2*ChunkSize+1) // one write, then no scan before Finish
	got, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Files(dir)
	if got["pages-1.img"] != want["pages-1.img"] {
		t.Fatalf("replaced file: watched %s, computed %s", got["pages-1.img"], want["pages-1.img"])
	}
}

// TestWatcherStop: Stop without Finish returns, and twice is fine.
func TestWatcherStop(t *testing.T) {
	dir := t.TempDir()
	w := Watch(dir)
	appendFile(t, filepath.Join(dir, "pages-1.img"), 1, ChunkSize+1, 1<<20)
	w.Stop()
	w.Stop()
}

func writeFileT(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
