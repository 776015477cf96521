package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"

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

// TestContainerdImagePathRestore is the route without containerd's content
// store: `ctr task checkpoint --exit --image-path DIR` on containerd 2.x,
// then a new container's task created with client.WithRestoreImagePath(DIR)
// (ctr has no restore from a directory). The shim restores from DIR in
// place and the counter carries on; DIR stays, as it is the caller's. The
// same DIR then restores on containerd 1.7, which passes the option but
// no checkpoint to a runtime not named io.containerd.runc*: the shim takes
// the option itself instead of starting the task fresh.
func TestContainerdImagePathRestore(t *testing.T) {
	d := startDaemon(t, ctrdVersions[1])
	d.importTestImage()
	d.runApp("ipr")
	dir := filepath.Join(d.dir, "images")
	out, err := d.ctrBinErr(d.ctrWithOptions(), "task", "checkpoint", "--exit", "--image-path", dir, "ipr")
	if err != nil {
		t.Fatalf("ctr task checkpoint --exit --image-path %s: %v\n%s\n%s", dir, err, out, lastLines(d.log(), 30))
	}
	d.waitStopped("ipr")
	before := ctrdLastTick(t, d.logPath("ipr"))
	d.restoreFromPath(dir, "ipr-restored")
	assertContinues(t, d.logPath("ipr-restored"), before)
	if _, err := os.Stat(filepath.Join(dir, snapshot.ManifestName)); err != nil {
		t.Fatalf("the image directory went after the restore: %v", err)
	}
	d.remove("ipr-restored")

	old := startDaemon(t, ctrdVersions[0])
	old.importTestImage()
	old.restoreFromPath(dir, "ipr-17")
	assertContinues(t, old.logPath("ipr-17"), before)
	if !strings.Contains(old.log(), "restoring from the runc option CriuImagePath") {
		t.Errorf("containerd 1.7's log lacks the shim's line on CriuImagePath:\n%s", lastLines(old.log(), 20))
	}
	old.remove("ipr-17")
}

// restoreFromPath restores a checkpoint directory into a new container id
// of the test image through client.WithRestoreImagePath and waits for
// its ticks.
func (d *daemon) restoreFromPath(dir, id string) {
	d.t.Helper()
	_ = os.MkdirAll(filepath.Join(d.dir, "logs"), 0o755)
	ctx := namespacedCtx()
	task, err := d.newContainer(id).NewTask(ctx, cio.LogFile(d.logPath(id)), client.WithRestoreImagePath(dir))
	if err != nil {
		d.t.Fatalf("restore %s from %s: %v\n%s", id, dir, err, lastLines(d.log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.t.Fatalf("start restored %s: %v\n%s", id, err, lastLines(d.log(), 30))
	}
	d.waitTicks(id, 3)
}

// TestContainerdRestoreRemovesCopy: containerd unpacks a content-store
// checkpoint into a temporary directory of its own for the restore and
// never removes it; that copy holds the processes' memory, so the shim
// removes it once the restore has read it. On both containerd lines.
func TestContainerdRestoreRemovesCopy(t *testing.T) {
	for _, v := range ctrdVersions {
		t.Run(v.name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("XDG_RUNTIME_DIR", tmp) // where containerd makes its copy
			d := startDaemon(t, v)
			d.importTestImage()
			d.runApp("rc")
			ref, _ := d.taskCheckpoint("rc", "--exit")
			d.waitStopped("rc")
			before := ctrdLastTick(t, d.logPath("rc"))
			d.restoreTask(ref, "rc-clone")
			d.waitTicks("rc-clone", 3)
			assertContinues(t, d.logPath("rc-clone"), before)
			left, _ := filepath.Glob(filepath.Join(tmp, "ctrd-checkpoint*"))
			if len(left) > 0 {
				t.Fatalf("containerd's copy of the checkpoint is left after the restore: %v", left)
			}
			d.remove("rc-clone")
		})
	}
}
