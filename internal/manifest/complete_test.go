package manifest

import (
	"os"
	"path/filepath"
	"testing"
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
