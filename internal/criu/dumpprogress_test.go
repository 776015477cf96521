package criu

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDumpEstimate(t *testing.T) {
	self := dumpableMemory(os.Getpid())
	if self <= 0 || statmMemory(os.Getpid()) <= 0 {
		t.Fatalf("this test's own memory: smaps %d, statm %d", self, statmMemory(os.Getpid()))
	}
	if got := DumpEstimate([]int{os.Getpid()}, 1<<50); got < 1<<50 {
		t.Fatalf("GPU memory missing from the host memory must be added: %d", got)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "pages-1.img"), make([]byte, 3000), 0o600)
	os.WriteFile(filepath.Join(dir, "pages-2.img"), make([]byte, 1000), 0o600)
	os.WriteFile(filepath.Join(dir, "core-1.img"), make([]byte, 500), 0o600)
	if got := PagesBytes(dir); got != 4000 {
		t.Fatalf("pages bytes %d, want 4000", got)
	}
}
