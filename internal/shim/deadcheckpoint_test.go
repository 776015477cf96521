package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// dumpDir is an image directory as CRIU leaves it: a dump that completed
// (its stats and the log's last line) or one cut short.
func dumpDir(t *testing.T, completed bool) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"inventory.img": "i", "pages-1.img": "p", "dump.log": "dumping\n"}
	if completed {
		files["stats-dump"] = "s"
		files["dump.log"] += "Dumping finished successfully\n"
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A dead shim's checkpoint whose dump completed is kept as it is, for a
// restore to complete; one whose dump did not is emptied and marked
// partial, its log kept; containerd's own directory is containerd's.
func TestSettleDeadCheckpoint(t *testing.T) {
	done := dumpDir(t, true)
	if outcome, kept := settle(&ckptRecord{ID: "c", Dir: done, Step: "digests"}); !kept || !strings.Contains(outcome, "is kept") {
		t.Errorf("completed dump: %q, kept %v", outcome, kept)
	}
	if ok, err := manifest.DumpCompleted(done, nil); !ok || err != nil {
		t.Errorf("the kept dump no longer reads completed: %v", err)
	}

	cut := dumpDir(t, false)
	outcome, kept := settle(&ckptRecord{ID: "c", Dir: cut, Step: "dump"})
	if kept || !strings.Contains(outcome, "partial") {
		t.Errorf("partial dump: %q, kept %v", outcome, kept)
	}
	p, err := manifest.ReadPartial(cut)
	if err != nil || p == nil || !strings.Contains(p.Error, `after step "dump" began`) {
		t.Fatalf("partial mark: %+v, %v", p, err)
	}
	if _, err := os.Stat(filepath.Join(cut, "pages-1.img")); !os.IsNotExist(err) {
		t.Errorf("the partial dump's pages are still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cut, "dump.log")); err != nil {
		t.Errorf("the partial dump's log went: %v", err)
	}

	tmp := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", tmp)
	own := filepath.Join(tmp, "ctrd-checkpoint123")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if outcome, kept := settle(&ckptRecord{ID: "c", Dir: own}); kept || !strings.Contains(outcome, "containerd's own directory") {
		t.Errorf("containerd's directory: %q, kept %v", outcome, kept)
	}
	if p, _ := manifest.ReadPartial(own); p != nil {
		t.Errorf("containerd's own directory was marked")
	}
}

// The record survives a round trip, and its absence reads as none.
func TestCkptRecord(t *testing.T) {
	dir := t.TempDir()
	if r, err := readCkptRecord(dir); r != nil || err != nil {
		t.Fatalf("no record: %+v, %v", r, err)
	}
	want := &ckptRecord{ID: "c", Dir: "/d", WorkDir: "/w", Exit: true, Step: "dump"}
	if err := want.write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := readCkptRecord(dir)
	if err != nil || got.ID != "c" || got.Dir != "/d" || got.WorkDir != "/w" || !got.Exit || got.Step != "dump" {
		t.Fatalf("read back: %+v, %v", got, err)
	}
	if err := removeCkptRecord(dir); err != nil {
		t.Fatal(err)
	}
	if err := removeCkptRecord(dir); err != nil {
		t.Fatalf("a second removal: %v", err)
	}
}
