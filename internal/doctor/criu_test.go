package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// criuZero tells cryo's CRIU (patch 0004's check feature is in the binary)
// from another, which writes zeroed GPU memory in full.
func TestCRIUZero(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if c := criuZero(write("patched", "\x7fELF...cryo_zero_pages...")); c.Status != OK || !strings.Contains(c.Detail, "patch 0004") {
		t.Errorf("cryo's CRIU: %+v", c)
	}
	c := criuZero(write("stock", "\x7fELF...mem_dirty_track..."))
	if c.Status != Warn || !strings.Contains(c.Detail, "all-zero pages") || !strings.Contains(c.Fix, "make deps") {
		t.Errorf("stock CRIU: %+v", c)
	}
	if c := criuZero(filepath.Join(dir, "missing")); c.Status != Skip {
		t.Errorf("no CRIU: %+v", c)
	}
}

// criuSeccomp tells cryo's CRIU (patch 0005's variable is in the binary)
// from another, with which restores under a seccomp spec are refused.
func TestCRIUSeccomp(t *testing.T) {
	dir := t.TempDir()
	patched, stock := filepath.Join(dir, "patched"), filepath.Join(dir, "stock")
	if os.WriteFile(patched, []byte("\x7fELF...CRYO_CRIU_SECCOMP_DIR..."), 0o755) != nil || os.WriteFile(stock, []byte("\x7fELF...mem_dirty_track..."), 0o755) != nil {
		t.Fatal("write the fake binaries")
	}
	if c := criuSeccomp(patched); c.Status != OK || !strings.Contains(c.Detail, "patch 0005") {
		t.Errorf("cryo's CRIU: %+v", c)
	}
	if c := criuSeccomp(stock); c.Status != Warn || !strings.Contains(c.Detail, "refused") || !strings.Contains(c.Fix, "make deps") {
		t.Errorf("stock CRIU: %+v", c)
	}
}
