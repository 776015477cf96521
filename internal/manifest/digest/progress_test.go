package digest

import (
	"bytes"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/progress"
)

// counted records what a hashing reports.
type counted struct{ total, done atomic.Int64 }

func (c *counted) SetTotal(n int64) { c.total.Store(n) }
func (c *counted) Add(n int64)      { c.done.Add(n) }

// TestHashingReportsBytes: Files, Verify and a watched dump's Finish report
// a total and reach it; Finish counts only what the dump left unhashed.
func TestHashingReportsBytes(t *testing.T) {
	dir := t.TempDir()
	w := Watch(dir)
	appendFile(t, filepath.Join(dir, "pages-1.img"), 1, 3*ChunkSize+100, 4<<20)
	writeFileT(t, filepath.Join(dir, "core-1.img"), "core")
	time.Sleep(3 * watchInterval)
	size := int64(3*ChunkSize + 100 + 4)

	var fin counted
	digests, err := w.FinishWith(&fin)
	if err != nil {
		t.Fatal(err)
	}
	if fin.total.Load() != fin.done.Load() || fin.total.Load() >= size {
		t.Fatalf("finish after a watched dump: %d of %d bytes, want less than the %d the files hold", fin.done.Load(), fin.total.Load(), size)
	}
	var all counted
	if _, err := FilesWith(dir, &all); err != nil {
		t.Fatal(err)
	}
	if all.total.Load() != size || all.done.Load() != size {
		t.Fatalf("files: %d of %d bytes, want %d", all.done.Load(), all.total.Load(), size)
	}
	// Through a real progress task: the line ends "done" with the bytes.
	var buf bytes.Buffer
	task := progress.New(&buf, false).Start("verifying checkpoint", 0)
	err = VerifyWith(dir, digests, task)
	task.End(err)
	if err != nil || !strings.Contains(buf.String(), " (48.0 MiB, ") || !strings.Contains(buf.String(), "verifying checkpoint done in ") {
		t.Fatalf("verify: %v, %q", err, buf.String())
	}
}
