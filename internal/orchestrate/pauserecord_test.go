package orchestrate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
)

func TestReadPauses(t *testing.T) {
	dir := t.TempDir()
	o := New(WithConfig(config.Config{LockDir: dir}))
	if err := o.env().locks.pauses().write(&pauseRecord{ID: "ctr", Processes: nil}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "paused-bad.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, err := ReadPauses(dir)
	if len(ps) != 1 || ps[0].ID != "ctr" || ps[0].Path != o.env().locks.pauses().path("ctr") {
		t.Fatalf("pauses %+v", ps)
	}
	if err == nil {
		t.Fatal("a damaged record is no error")
	}
}
