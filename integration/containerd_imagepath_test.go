package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/snapshot"
)

// TestContainerdImagePathNew: `ctr task checkpoint --image-path DIR` through
// the shim on containerd 2.x, with a DIR that does not exist yet. containerd
// hands the path to the shim as it is; runc would create it, but cryo
// writes its manifest there before runc runs, so the shim must create it,
// owner-only. The task runs on, and DIR holds the CRIU images, the manifest
// and CRIU's log and stats.
func TestContainerdImagePathNew(t *testing.T) {
	start := time.Now()
	d := startDaemon(t, ctrdVersions[1])
	d.importTestImage()
	d.runApp("ip")
	dir := filepath.Join(d.dir, "new", "images") // neither exists
	out, err := d.ctrBinErr(d.ctrWithOptions(), "task", "checkpoint", "--image-path", dir, "ip")
	if err != nil {
		t.Fatalf("ctr task checkpoint --image-path %s: %v\n%s\n%s", dir, err, out, lastLines(d.log(), 30))
	}
	d.assertRunsOn("ip")
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("image directory %s: %v, mode %v; want it created 0700", dir, err, fi.Mode().Perm())
	}
	for _, name := range []string{snapshot.ManifestName, "inventory.img", "dump.log", "stats-dump"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("image directory lacks %s: %v", name, err)
		}
	}
	d.remove("ip")
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}
