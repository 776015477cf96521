package integration

import (
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"google.golang.org/protobuf/proto"
)

// TestImageRestoreRefusesEditedMounts: `cryo image restore --containerd` of
// a checkpoint image whose /proc/acpi mask was made a writable proc mount,
// unpacked, edited and re-sealed with cryo's own tools, is refused at the
// confine step, and no container of that name is left.
func TestImageRestoreRefusesEditedMounts(t *testing.T) {
	v := ctrdVersions[1]
	n := newCtrdNode(t, v)
	n.importTestImage()
	app, clone := uniqueID("app"), uniqueID("clone")
	n.runApp(app)
	ckpt, _ := n.taskCheckpoint(app, "--exit")
	n.waitStopped(app)
	t.Cleanup(func() { n.remove(app); n.remove(clone) })
	ref := "localhost/ckpt/mounts-" + v.dir + ":1"
	n.cryo(t, "image", "build", "--containerd", ckpt, ref)

	dir := filepath.Join(t.TempDir(), "unpacked")
	n.imgNode.cryo(t, "image", "unpack", ref, dir)
	names, _ := filepath.Glob(filepath.Join(dir, "*", "mountpoints-*.img"))
	if len(names) != 1 {
		t.Fatalf("the unpacked image %s holds %d mountpoints images, want 1", dir, len(names))
	}
	ck := filepath.Dir(names[0])
	proc := mountAt(t, ck, "/proc")
	editMountAt(t, ck, "/proc/acpi", func(m *mnt.MntEntry) {
		rw := m.GetFlags() &^ 1
		m.Fstype, m.RootDev, m.Source, m.Root, m.Flags, m.SbFlags = proc.Fstype, proc.RootDev, proc.Source, proto.String("/"), &rw, proto.Uint32(0)
	})
	reseal(t, ck)
	crafted := "localhost/ckpt/mounts-" + v.dir + ":crafted"
	wantIn(t, n.imgNode.cryo(t, "image", "build", dir, crafted), "built "+crafted)

	out := n.cryoFails(t, "image", "restore", "--containerd", "--name", clone, "--log", n.logPath(clone), "--gpus", standInNode(t, 0), crafted)
	wantIn(t, out, "confine", "masked path /proc/acpi", "proc", "writable", "remedy")
	t.Logf("refused:\n%s", out)
	if _, err := n.client.LoadContainer(namespacedCtx(), clone); err == nil {
		t.Errorf("the refused restore left container %s", clone)
	}
}
