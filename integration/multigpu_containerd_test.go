package integration

import (
	"context"
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
)

// gpusFile is the daemon's CRYO_FAKE_GPUS_FILE: what the fake NVML of the
// shims reports, changed by a test for the time it runs.
// A test that set CRYO_FAKE_GPUS_FILE itself before starting the daemon
// keeps its own.
func (d *daemon) gpusFile() string {
	if f := os.Getenv("CRYO_FAKE_GPUS_FILE"); f != "" {
		return f
	}
	return filepath.Join(d.dir, "gpus")
}

// fakeGPUs makes the daemon's host the fake host h until the test ends.
func (d *daemon) fakeGPUs(h fakeHost) {
	if err := os.WriteFile(d.gpusFile(), []byte(h.GPUs), 0o644); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { os.Remove(d.gpusFile()) })
}

// withGPUs gives a container the stand-in nodes of host's GPUs gpus, the
// device-cgroup rule for them, and the host's GPU table for the fake app.
func withGPUs(h fakeHost, gpus ...int) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		giveStandIns(s, gpus...)
		s.Process.Env = append(s.Process.Env, "CRYO_FAKE_GPUS="+h.GPUs)
		return nil
	}
}

// newFakeGPUContainer creates a container of the test image given GPUs gpus.
func (d *daemon) newFakeGPUContainer(id string, h fakeHost, gpus ...int) client.Container {
	d.t.Helper()
	ctx := namespacedCtx()
	img, err := d.client.GetImage(ctx, testImage)
	if err != nil {
		d.t.Fatal(err)
	}
	c, err := d.client.NewContainer(ctx, id,
		client.WithImage(img), client.WithNewSnapshot(id+"-snap", img), client.WithRuntime(cryoRuntime, nil),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("/bin/fakecuda-app", "100"), withGPUs(h, gpus...)))
	if err != nil {
		d.t.Fatalf("new container %s: %v", id, err)
	}
	return c
}

// assertGPUs checks that a task's init runs on the GPUs want of h.
func (d *daemon) assertGPUs(id string, h fakeHost, want ...int) {
	d.t.Helper()
	assertRunsOn(d.t, int(d.task(id).Pid()), h, want...)
}

// testMultiGPUMove: on a 2-GPU host, a container given GPU 1 is
// checkpointed (--exit) and restored into a container whose new spec gives
// it GPU 0, as a Kubernetes device plugin would on another node: the shim
// gives the restored container GPU 0's node and remaps the app onto it.
func testMultiGPUMove(d *daemon) {
	h := newFakeHost(2, "8a8a8a8a")
	d.fakeGPUs(h)
	c := d.newFakeGPUContainer("mg", h, 1)
	d.startApp(c)
	d.assertGPUs("mg", h, 1)
	ref, before := d.taskCheckpoint("mg", "--exit")
	d.waitStopped("mg")
	m := d.checkpointManifest(ref)
	if len(m.Needs) != 1 || m.Needs[0].UUID != h.UUIDs[1] {
		d.t.Fatalf("needs: %+v, want only %s", m.Needs, h.UUIDs[1])
	}
	d.remove("mg")

	ctx := namespacedCtx()
	ckpt, err := d.client.GetImage(ctx, ref)
	if err != nil {
		d.t.Fatal(err)
	}
	moved := d.newFakeGPUContainer("mg-moved", h, 0)
	task, err := moved.NewTask(ctx, cio.LogFile(d.logPath("mg-moved")), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		d.t.Fatalf("restore: %v\n%s", err, lastLines(d.log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.t.Fatalf("start restored: %v\n%s", err, lastLines(d.log(), 30))
	}
	d.waitTicks("mg-moved", 3)
	assertContinues(d.t, d.logPath("mg-moved"), before)
	d.assertGPUs("mg-moved", h, 0)
	d.remove("mg-moved")
}

// testImageRestoreOtherGPU: `cryo image restore --containerd --gpus` gives
// the restored container another GPU than the one it ran on, as
// contrib/demo.sh does on a two-GPU host. The container ran on GPU 1 of a
// 2-GPU host; its image is restored with --gpus naming GPU 0's node (the
// fake driver's stand-in nodes exist only as paths, so the test hands one
// over as a device plugin would), and the shim remaps the app onto GPU 0.
// A GPU index the host lacks is refused first, naming the host's GPUs.
func testImageRestoreOtherGPU(d *daemon) {
	h := newFakeHost(2, "9b9b9b9b")
	d.fakeGPUs(h)
	// The CLI reads the same fake host as the shims, for --gpus by index.
	n := newNode(d.t, append(fakeDriverEnv(d.t, ""), "CRYO_FAKE_GPUS_FILE="+d.gpusFile()))
	at := []string{"--address", d.socket, "--namespace", testNamespace}
	app, moved := uniqueID("gp"), uniqueID("gp-moved")
	d.startApp(d.newFakeGPUContainer(app, h, 1))
	d.assertGPUs(app, h, 1)
	ckpt, before := d.taskCheckpoint(app, "--exit")
	d.waitStopped(app)
	ref := "localhost/ckpt/" + app + ":1"
	n.cryo(d.t, append(append([]string{"image", "build", "--containerd"}, at...), ckpt, ref)...)
	d.remove(app)

	restore := append(append([]string{"image", "restore", "--containerd"}, at...), "--name", moved)
	out := cryoFails(d.t, imgTimeout, n.env, append(restore, "--gpus", "2", ref)...)
	wantIn(d.t, out, "restore container "+moved, "this host has no GPU 2", "1: NVIDIA H100 80GB HBM3 "+h.UUIDs[1], "nvidia-smi -L")

	log := d.logPath(moved)
	out = n.cryo(d.t, append(restore, "--log", log, "--gpus", standInNode(d.t, 0), ref)...)
	wantIn(d.t, out, "restored container "+moved)
	d.waitTicks(moved, 3)
	assertContinues(d.t, log, before)
	d.assertGPUs(moved, h, 0)
	d.remove(moved)
}
