package containerd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestContainerdImagePathNew: `ctr task checkpoint --image-path DIR` through
// the shim on containerd 2.x, with a DIR that does not exist yet. containerd
// hands the path to the shim as it is; runc would create it, but cryo
// writes its manifest there before runc runs, so the shim must create it,
// owner-only. The task runs on, and DIR holds the CRIU images, the manifest
// and CRIU's log and stats.
func TestContainerdImagePathNew(t *testing.T) {
	start := time.Now()
	d := harness.StartDaemon(t, harness.CtrdVersions[1])
	d.ImportTestImage()
	d.RunApp("ip")
	dir := filepath.Join(d.Dir, "new", "images") // neither exists
	out, err := d.CtrBinErr(d.CtrWithOptions(), "task", "checkpoint", "--image-path", dir, "ip")
	if err != nil {
		t.Fatalf("ctr task checkpoint --image-path %s: %v\n%s\n%s", dir, err, out, harness.LastLines(d.Log(), 30))
	}
	d.AssertRunsOn("ip")
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("image directory %s: %v, mode %v; want it created 0700", dir, err, fi.Mode().Perm())
	}
	for _, name := range []string{manifest.ManifestName, "inventory.img", "dump.log", "stats-dump"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("image directory lacks %s: %v", name, err)
		}
	}
	d.Remove("ip")
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
	d := harness.StartDaemon(t, harness.CtrdVersions[1])
	d.ImportTestImage()
	d.RunApp("ipr")
	dir := filepath.Join(d.Dir, "images")
	out, err := d.CtrBinErr(d.CtrWithOptions(), "task", "checkpoint", "--exit", "--image-path", dir, "ipr")
	if err != nil {
		t.Fatalf("ctr task checkpoint --exit --image-path %s: %v\n%s\n%s", dir, err, out, harness.LastLines(d.Log(), 30))
	}
	d.WaitStopped("ipr")
	before := harness.CtrdLastTick(t, d.LogPath("ipr"))
	d.RestoreFromPath(dir, "ipr-restored")
	harness.AssertContinues(t, d.LogPath("ipr-restored"), before)
	if _, err := os.Stat(filepath.Join(dir, manifest.ManifestName)); err != nil {
		t.Fatalf("the image directory went after the restore: %v", err)
	}
	d.Remove("ipr-restored")

	old := harness.StartDaemon(t, harness.CtrdVersions[0])
	old.ImportTestImage()
	old.RestoreFromPath(dir, "ipr-17")
	harness.AssertContinues(t, old.LogPath("ipr-17"), before)
	if !strings.Contains(old.Log(), "restoring from the runc option CriuImagePath") {
		t.Errorf("containerd 1.7's log lacks the shim's line on CriuImagePath:\n%s", harness.LastLines(old.Log(), 20))
	}
	old.Remove("ipr-17")
}

// TestContainerdRestoreRemovesCopy: containerd unpacks a content-store
// checkpoint into a temporary directory of its own for the restore and
// never removes it; that copy holds the processes' memory, so the shim
// removes it once the restore has read it. On both containerd lines.
func TestContainerdRestoreRemovesCopy(t *testing.T) {
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("XDG_RUNTIME_DIR", tmp) // where containerd makes its copy
			d := harness.StartDaemon(t, v)
			d.ImportTestImage()
			d.RunApp("rc")
			ref, _ := d.TaskCheckpoint("rc", "--exit")
			d.WaitStopped("rc")
			before := harness.CtrdLastTick(t, d.LogPath("rc"))
			d.RestoreTask(ref, "rc-clone")
			d.WaitTicks("rc-clone", 3)
			harness.AssertContinues(t, d.LogPath("rc-clone"), before)
			left, _ := filepath.Glob(filepath.Join(tmp, "ctrd-checkpoint*"))
			if len(left) > 0 {
				t.Fatalf("containerd's copy of the checkpoint is left after the restore: %v", left)
			}
			d.Remove("rc-clone")
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
	d := harness.StartDaemon(t, harness.CtrdVersions[0])
	d.ImportTestImage()
	d.RunApp("lg")
	dir := t.TempDir()
	images, work := filepath.Join(dir, "cr"), filepath.Join(dir, "work")
	ctx := harness.NamespacedCtx()
	// exit (1): the task stops at its checkpoint, so that the counter it
	// printed last is the one the restore carries on from.
	old := legacyAny("containerd.linux.runc.CheckpointOptions", map[protowire.Number]any{1: true, 8: work, 9: images})
	if _, err := d.Task("lg").Checkpoint(ctx, func(r *client.CheckpointTaskInfo) error {
		r.Options = old
		return nil
	}); err != nil {
		t.Fatalf("checkpoint with containerd 1.7's old options: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	if _, err := os.Stat(filepath.Join(images, manifest.ManifestName)); err != nil {
		t.Fatalf("nothing was checkpointed into the image path %s: %v\n%s", images, err, harness.LastLines(d.Log(), 30))
	}
	d.WaitStopped("lg")
	before := harness.CtrdLastTick(t, d.LogPath("lg"))
	d.Remove("lg")
	create := legacyAny("containerd.linux.runc.CreateOptions", map[protowire.Number]any{12: work, 13: images})
	task, err := d.NewContainer("lg-r").NewTask(ctx, cio.LogFile(d.LogPath("lg-r")), func(_ context.Context, _ *client.Client, ti *client.TaskInfo) error {
		ti.Options = create
		return nil
	})
	if err != nil {
		t.Fatalf("restore with containerd 1.7's old options: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start the restored task: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	d.WaitTicks("lg-r", 3)
	harness.AssertContinues(t, d.LogPath("lg-r"), before)
	d.Remove("lg-r")
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
