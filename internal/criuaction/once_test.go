package criuaction

import (
	"os"
	"path/filepath"
	"testing"
)

// CRIU in runc's RPC mode runs every action twice: the second run of an
// action for the same CRIU process is recognised, another action is not,
// and markers of CRIU processes that are gone are swept.
func TestFirstRunOncePerCRIU(t *testing.T) {
	markerDir = t.TempDir()
	if !firstRun("pre-dump") {
		t.Fatal("the first pre-dump was taken for a repeat")
	}
	if firstRun("pre-dump") {
		t.Fatal("the repeated pre-dump was taken for a first run")
	}
	if !firstRun("post-dump") {
		t.Fatal("post-dump was taken for a repeat of pre-dump")
	}
	stale := filepath.Join(markerDir, "999999999-12345-pre-dump")
	os.WriteFile(stale, nil, 0o600)
	firstRun("post-restore")
	if _, err := os.Stat(stale); err == nil {
		t.Fatal("the marker of a CRIU process that is gone was kept")
	}
	rememberImageDir("/var/lib/ckpt")
	if _, err := os.Stat(filepath.Join(markerDir, criuKey()+"-imagedir")); err != nil {
		t.Fatalf("image directory not remembered: %v", err)
	}
}
