package containerd

import (
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/cryo-gpu/cryo/integration/harness"
)

// testMultiGPUMove: on a 2-GPU host, a container given GPU 1 is
// checkpointed (--exit) and restored into a container whose new spec gives
// it GPU 0, as a Kubernetes device plugin would on another node: the shim
// gives the restored container GPU 0's node and remaps the app onto it.
func testMultiGPUMove(d *harness.Daemon) {
	h := harness.NewFakeHost(2, "8a8a8a8a")
	d.FakeGPUs(h)
	c := d.NewFakeGPUContainer("mg", h, 1)
	d.StartApp(c)
	d.AssertGPUs("mg", h, 1)
	ref, before := d.TaskCheckpoint("mg", "--exit")
	d.WaitStopped("mg")
	m := d.CheckpointManifest(ref)
	if len(m.Needs) != 1 || m.Needs[0].UUID != h.UUIDs[1] {
		d.T.Fatalf("needs: %+v, want only %s", m.Needs, h.UUIDs[1])
	}
	d.Remove("mg")

	ctx := harness.NamespacedCtx()
	ckpt, err := d.Client.GetImage(ctx, ref)
	if err != nil {
		d.T.Fatal(err)
	}
	moved := d.NewFakeGPUContainer("mg-moved", h, 0)
	task, err := moved.NewTask(ctx, cio.LogFile(d.LogPath("mg-moved")), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		d.T.Fatalf("restore: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.T.Fatalf("start restored: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	d.WaitTicks("mg-moved", 3)
	harness.AssertContinues(d.T, d.LogPath("mg-moved"), before)
	d.AssertGPUs("mg-moved", h, 0)
	d.Remove("mg-moved")
}

// testImageRestoreOtherGPU: `cryo image restore --containerd --gpus` gives
// the restored container another GPU than the one it ran on, as
// contrib/demo.sh does on a two-GPU host. The container ran on GPU 1 of a
// 2-GPU host; its image is restored with --gpus naming GPU 0's node (the
// fake driver's stand-in nodes exist only as paths, so the test hands one
// over as a device plugin would), and the shim remaps the app onto GPU 0.
// A GPU index the host lacks is refused first, naming the host's GPUs.
func testImageRestoreOtherGPU(d *harness.Daemon) {
	h := harness.NewFakeHost(2, "9b9b9b9b")
	d.FakeGPUs(h)
	// The CLI reads the same fake host as the shims, for --gpus by index.
	n := harness.NewNode(d.T, append(harness.FakeDriverEnv(d.T, ""), "CRYO_FAKE_GPUS_FILE="+d.GpusFile()))
	at := []string{"--address", d.Socket, "--namespace", harness.TestNamespace}
	app, moved := harness.UniqueID("gp"), harness.UniqueID("gp-moved")
	d.StartApp(d.NewFakeGPUContainer(app, h, 1))
	d.AssertGPUs(app, h, 1)
	ckpt, before := d.TaskCheckpoint(app, "--exit")
	d.WaitStopped(app)
	ref := "localhost/ckpt/" + app + ":1"
	n.Cryo(d.T, append(append([]string{"image", "build", "--containerd"}, at...), ckpt, ref)...)
	d.Remove(app)

	restore := append(append([]string{"image", "restore", "--containerd"}, at...), "--name", moved)
	out := harness.CryoFails(d.T, harness.ImgTimeout, n.Env, append(restore, "--gpus", "2", ref)...)
	harness.WantIn(d.T, out, "restore container "+moved, "this host has no GPU 2", "1: NVIDIA H100 80GB HBM3 "+h.UUIDs[1], "nvidia-smi -L")

	log := d.LogPath(moved)
	out = n.Cryo(d.T, append(restore, "--log", log, "--gpus", harness.StandInNode(d.T, 0), ref)...)
	harness.WantIn(d.T, out, "restored container "+moved)
	d.WaitTicks(moved, 3)
	harness.AssertContinues(d.T, log, before)
	d.AssertGPUs(moved, h, 0)
	d.Remove(moved)
}
