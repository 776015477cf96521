package cli

import (
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"github.com/cryo-gpu/cryo/integration/harness"
	"google.golang.org/protobuf/proto"
)

// TestImageRestoreRefusesEditedMounts: `cryo image restore --containerd` of
// a checkpoint image whose /proc/acpi mask was made a writable proc mount,
// unpacked, edited and re-sealed with cryo's own tools, is refused at the
// confine step, and no container of that name is left.
func TestImageRestoreRefusesEditedMounts(t *testing.T) {
	v := harness.CtrdVersions[1]
	n := harness.NewCtrdNode(t, v)
	n.ImportTestImage()
	app, clone := harness.UniqueID("app"), harness.UniqueID("clone")
	n.RunApp(app)
	ckpt, _ := n.TaskCheckpoint(app, "--exit")
	n.WaitStopped(app)
	t.Cleanup(func() { n.Remove(app); n.Remove(clone) })
	ref := "localhost/ckpt/mounts-" + v.Dir + ":1"
	n.Cryo(t, "image", "build", "--containerd", ckpt, ref)

	dir := filepath.Join(t.TempDir(), "unpacked")
	n.ImgNode.Cryo(t, "image", "unpack", ref, dir)
	names, _ := filepath.Glob(filepath.Join(dir, "*", "mountpoints-*.img"))
	if len(names) != 1 {
		t.Fatalf("the unpacked image %s holds %d mountpoints images, want 1", dir, len(names))
	}
	ck := filepath.Dir(names[0])
	proc := harness.MountAt(t, ck, "/proc")
	harness.EditMountAt(t, ck, "/proc/acpi", func(m *mnt.MntEntry) {
		rw := m.GetFlags() &^ 1
		m.Fstype, m.RootDev, m.Source, m.Root, m.Flags, m.SbFlags = proc.Fstype, proc.RootDev, proc.Source, proto.String("/"), &rw, proto.Uint32(0)
	})
	harness.Reseal(t, ck)
	crafted := "localhost/ckpt/mounts-" + v.Dir + ":crafted"
	harness.WantIn(t, n.ImgNode.Cryo(t, "image", "build", dir, crafted), "built "+crafted)

	out := n.CryoFails(t, "image", "restore", "--containerd", "--name", clone, "--log", n.LogPath(clone), "--gpus", harness.StandInNode(t, 0), crafted)
	harness.WantIn(t, out, "confine", "masked path /proc/acpi", "proc", "writable", "remedy")
	t.Logf("refused:\n%s", out)
	if _, err := n.Client.LoadContainer(harness.NamespacedCtx(), clone); err == nil {
		t.Errorf("the refused restore left container %s", clone)
	}
}
