package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/cryo-gpu/cryo/internal/manifest"
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
	for _, name := range []string{manifest.ManifestName, "inventory.img", "dump.log", "stats-dump"} {
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
	if _, err := os.Stat(filepath.Join(dir, manifest.ManifestName)); err != nil {
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

// TestContainerd17ClientImagePath is containerd 1.7's own client test
// TestCheckpointRestoreWithImagePath against the cryo shim. containerd
// 1.7's client sends the options of its old runtime types
// (containerd.linux.runc.CheckpointOptions and CreateOptions) to any
// runtime not named io.containerd.runc*, and its daemon ignores their
// paths: the shim reads those types, checkpoints into the image path, and
// restores a new container from it.
func TestContainerd17ClientImagePath(t *testing.T) {
	d := startDaemon(t, ctrdVersions[0])
	d.importTestImage()
	d.runApp("lg")
	dir := t.TempDir()
	images, work := filepath.Join(dir, "cr"), filepath.Join(dir, "work")
	ctx := namespacedCtx()
	// exit (1): the task stops at its checkpoint, so that the counter it
	// printed last is the one the restore carries on from.
	old := legacyAny("containerd.linux.runc.CheckpointOptions", map[protowire.Number]any{1: true, 8: work, 9: images})
	if _, err := d.task("lg").Checkpoint(ctx, func(r *client.CheckpointTaskInfo) error {
		r.Options = old
		return nil
	}); err != nil {
		t.Fatalf("checkpoint with containerd 1.7's old options: %v\n%s", err, lastLines(d.log(), 30))
	}
	if _, err := os.Stat(filepath.Join(images, manifest.ManifestName)); err != nil {
		t.Fatalf("nothing was checkpointed into the image path %s: %v\n%s", images, err, lastLines(d.log(), 30))
	}
	d.waitStopped("lg")
	before := ctrdLastTick(t, d.logPath("lg"))
	d.remove("lg")
	create := legacyAny("containerd.linux.runc.CreateOptions", map[protowire.Number]any{12: work, 13: images})
	task, err := d.newContainer("lg-r").NewTask(ctx, cio.LogFile(d.logPath("lg-r")), func(_ context.Context, _ *client.Client, ti *client.TaskInfo) error {
		ti.Options = create
		return nil
	})
	if err != nil {
		t.Fatalf("restore with containerd 1.7's old options: %v\n%s", err, lastLines(d.log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start the restored task: %v\n%s", err, lastLines(d.log(), 30))
	}
	d.waitTicks("lg-r", 3)
	assertContinues(t, d.logPath("lg-r"), before)
	d.remove("lg-r")
}

// legacyAny is a message of containerd 1.7's old runtime types, string
// and bool fields by number, as its client sends it.
func legacyAny(typeURL string, fields map[protowire.Number]any) *anypb.Any {
	var b []byte
	for num := protowire.Number(1); num <= 13; num++ {
		switch v := fields[num].(type) {
		case string:
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendString(b, v)
		case bool:
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, protowire.EncodeBool(v))
		}
	}
	return &anypb.Any{TypeUrl: typeURL, Value: b}
}
