package containerd

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

func TestImageContainerd(t *testing.T) {
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) { testImageContainerd(t, v) })
	}
}

func testImageContainerd(t *testing.T, v harness.CtrdVersion) {
	reg := harness.StartRegistry(t)
	a, b := harness.NewCtrdNode(t, v), harness.NewCtrdNode(t, v)
	a.ImportTestImage()

	// runc's state directory is shared by all daemons of the host: ids
	// unique to this run keep parallel runs apart.
	app, clone := harness.UniqueID("app"), harness.UniqueID("clone")

	// Node A: run, write into the rootfs, checkpoint (the task exits).
	a.RunApp(app)
	a.Ctr("task", "exec", "--exec-id", "mark", app, "/bin/sh", "-c", "echo carried > /marker")
	ckpt, tick := a.TaskCheckpoint(app, "--exit")
	a.WaitStopped(app)
	ref := reg.Addr + "/ckpt/ctrd-" + v.Dir + ":v1"
	out := a.Cryo(t, "image", "build", "--containerd", ckpt, ref)
	harness.WantIn(t, out, "layer base", "layer rootfs", "built "+ref)
	a.ImgNode.Cryo(t, "image", "push", ref)
	harness.WantIn(t, a.ImgNode.Cryo(t, "inspect", ref), "Kind:         containerd", "Base image:   "+harness.TestImage)

	// Node B without the base image: a clear refusal, nothing created. The
	// app ran with GPU 0's stand-in node, which node B has only as a path
	// of the test's: --gpus hands it over as a device plugin would.
	gpu0 := harness.StandInNode(t, 0)
	out = b.CryoFails(t, "image", "restore", "--pull", "--name", clone, "--gpus", gpu0, ref)
	harness.WantIn(t, out, "base image "+harness.TestImage+" is not in containerd namespace", "image pull")

	// Node B with it (the same image as A's): restore; the counter goes on
	// from where A stopped.
	b.Ctr("images", "import", "--all-platforms", filepath.Join(a.Dir, "image", "image.tar"))
	log := b.LogPath(clone)
	// The refusal above came before the pull: nothing came down yet.
	out = b.Cryo(t, "image", "restore", "--pull", "--containerd", "--name", clone, "--log", log, "--gpus", gpu0, ref)
	harness.WantIn(t, out, "restored container "+clone, "in place (no copy into containerd's content store)")
	if strings.Contains(out, "warning") {
		t.Errorf("restore warned:\n%s", out)
	}
	b.WaitTicksIn(log, 5)
	if first := harness.CtrdTicks(t, log)[0]; first <= tick {
		t.Fatalf("restored app printed tick %d first, want just after %d (a continuation, not a restart)", first, tick)
	}
	if got := strings.TrimSpace(b.Ctr("task", "exec", "--exec-id", "cat", clone, "/bin/cat", "/marker")); got != "carried" {
		t.Errorf("rootfs change lost: /marker = %q", got)
	}
	if st := b.TaskStatus(clone); st != "running" {
		t.Errorf("restored task is %s", st)
	}

	// A plain image is refused before anything reaches containerd.
	plain := reg.Addr + "/plain/busybox:v1"
	harness.PushPlainImage(t, plain)
	out = b.CryoFails(t, "restore", "--image", plain, "--pull", "--name", "plain")
	harness.WantIn(t, out, "is not a checkpoint image")
	containerCheckpointFlow(t, a, b, reg)
}

// containerCheckpointFlow: `ctr container checkpoint --task --rw`, exported
// with `ctr image export`, built from the tar, restored with `cryo restore
// --image` as a second container.
func containerCheckpointFlow(t *testing.T, a, b *harness.CtrdNode, reg *harness.ImgRegistry) {
	app, clone := harness.UniqueID("app"), harness.UniqueID("clone")
	a.RunApp(app)
	ck := "localhost/ckpt/" + app + ":1"
	tick := a.ContainerCheckpoint(app, ck)
	a.Remove(app)
	tar := filepath.Join(t.TempDir(), "ckpt.tar")
	// ctr 2.x (it also serves a 1.7 daemon); --local: the export through
	// the transfer service has been seen to end before the tar was complete.
	if out, err := a.CtrBinErr(a.CtrWithOptions(), "image", "export", "--local", "--skip-manifest-json", tar, ck); err != nil {
		t.Fatalf("ctr image export: %v\n%s", err, out)
	}
	ref := reg.Addr + "/ckpt/ctrd-container:v1"
	harness.WantIn(t, a.ImgNode.Cryo(t, "image", "build", tar, ref), "built "+ref)
	a.ImgNode.Cryo(t, "image", "push", ref)
	log := b.LogPath(clone)
	out := b.Cryo(t, "restore", "--image", ref, "--pull", "--name", clone, "--log", log, "--gpus", harness.StandInNode(t, 0))
	pid, _ := strconv.Atoi(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
	if pid <= 0 {
		t.Errorf("cryo restore --image printed no pid:\n%s", out)
	}
	b.WaitTicksIn(log, 5)
	if first := harness.CtrdTicks(t, log)[0]; first < tick {
		t.Fatalf("restored app printed tick %d first, want ≥ %d", first, tick)
	}
}
