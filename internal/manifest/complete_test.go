package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Under Podman, runc's --work-path takes CRIU's stats-dump and log out of
// the image directory: the manifest's CRIUWorkDir points DumpCompleted at
// them, and a log without the success line still means a partial dump.
func TestDumpCompletedWorkDir(t *testing.T) {
	img, work := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(img, criuInventory), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(work, criuStatsDump), []byte("x"), 0o600)
	m := &Manifest{CRIUWorkDir: work}
	if ok, err := DumpCompleted(img, nil); ok || err != nil {
		t.Fatalf("without the work dir: %v, %v; want not completed", ok, err)
	}
	if ok, err := DumpCompleted(img, m); !ok || err != nil {
		t.Fatalf("with the work dir: %v, %v; want completed", ok, err)
	}
	os.WriteFile(filepath.Join(work, "dump.log"), []byte("Error (criu/cr-dump.c): Dumping FAILED."), 0o600)
	if ok, _ := DumpCompleted(img, m); ok {
		t.Fatal("a dump log without the success line counted as completed")
	}
	os.WriteFile(filepath.Join(work, "dump.log"), []byte("(00.1) Dumping finished successfully\n"), 0o600)
	if ok, _ := DumpCompleted(img, m); !ok {
		t.Fatal("a dump log with the success line counted as partial")
	}
}

// A manifest that cannot be saved leaves the checkpoint unfinished: the
// remedy (free space, then --finish) is a value, and the cause closes its
// parenthesis before it, so a report prints its outcome after the cause.
func TestCompleteSaveFailsRemedy(t *testing.T) {
	img := t.TempDir()
	os.WriteFile(filepath.Join(img, criuInventory), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(img, criuStatsDump), []byte("x"), 0o600)
	// A directory where the manifest goes: the rename onto it fails, as
	// it would on a full disk, even for root.
	os.MkdirAll(filepath.Join(img, ManifestName, "x"), 0o700)
	err := Complete(img, &Manifest{}, digest.Records{Dir: t.TempDir()})
	var rm report.Remedied
	if !errors.As(err, &rm) {
		t.Fatalf("got %v, want a remedy as a value", err)
	}
	if want := "free space or make " + img + " writable, then run `cryo checkpoint --finish " + img + "`"; rm.RemedyText() != want {
		t.Errorf("remedy %q, want %q", rm.RemedyText(), want)
	}
	if c := rm.Cause(); !strings.HasPrefix(c, "complete the checkpoint in "+img+" (the manifest could not be saved: ") || !strings.HasSuffix(c, ")") {
		t.Errorf("cause %q", c)
	}
}
