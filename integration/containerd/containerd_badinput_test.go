package containerd

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// TestContainerdBadInput runs the shim's answers to bad input under
// containerd 2.x and 1.7: a checkpoint that needs a GPU this host lacks,
// and a shim killed in the middle of a checkpoint.
func TestContainerdBadInput(t *testing.T) {
	harness.RequireRoot(t)
	for _, v := range []harness.CtrdVersion{harness.CtrdVersions[1], harness.CtrdVersions[0]} {
		t.Run(v.Name, func(t *testing.T) {
			start := time.Now()
			// The fake NVML reads this file at every nvmlInit, in cryo's
			// helper: the test switches the host's GPUs at run time.
			gpus := filepath.Join(t.TempDir(), "gpus")
			t.Setenv("CRYO_FAKE_GPUS_FILE", gpus)
			d := harness.StartDaemon(t, v)
			d.ImportTestImage()
			for _, c := range []struct {
				name string
				run  func(d *harness.Daemon, gpus string)
			}{
				{"RestoreNeedsMissingGPU", testRestoreNeedsMissingGPU},
				{"ShimKilledWhileCUDALocked", testShimKilledWhileLocked},
				{"ShimKilledWhileCUDACheckpointed", testShimKilledWhileCheckpointed},
				{"ShimKilledWhileFrozen", testShimKilledWhileFrozen},
			} {
				t.Run(c.name, func(t *testing.T) {
					began := time.Now()
					c.run(d.With(t), gpus)
					t.Logf("%s/%s took %s", v.Name, c.name, time.Since(began).Round(time.Millisecond))
				})
			}
			t.Logf("%s took %s", v.Name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// testRestoreNeedsMissingGPU: a checkpoint taken on an H100, restored on a
// host that offers only an A100, fails at Create, through the Go client and
// through `ctr container restore`, with a message that names what the
// restore needs and what the host offers. Nothing is restored and the
// original container is not touched; on the H100 again the same
// checkpoints restore.
func testRestoreNeedsMissingGPU(d *harness.Daemon, gpus string) {
	d.RunApp("mg")
	pid := d.TaskPid("mg")
	ref, before := d.TaskCheckpoint("mg")
	cref := "localhost/cryo/checkpoint:mg"
	d.ContainerCheckpoint("mg", cref)

	if err := os.WriteFile(gpus, []byte(harness.A100+"\n"), 0o644); err != nil {
		d.T.Fatal(err)
	}
	defer os.Remove(gpus)

	// Go client: the task's Create fails.
	ctx := harness.NamespacedCtx()
	ckpt, err := d.Client.GetImage(ctx, ref)
	if err != nil {
		d.T.Fatal(err)
	}
	c := d.NewContainer("mg-go")
	_, err = c.NewTask(ctx, cio.LogFile(d.LogPath("mg-go")), client.WithTaskCheckpoint(ckpt))
	if err == nil {
		d.T.Fatalf("restore of an H100 checkpoint on an A100 host succeeded\n%s", harness.LastLines(d.Log(), 30))
	}
	harness.AssertGPURefusal(d.T, "Go client", err.Error())
	if !errdefs.IsFailedPrecondition(err) {
		d.T.Errorf("Go client: error class %v, want failed precondition", err)
	}
	d.AssertNoTask("mg-go")
	d.AssertNoRestore("mg-go")

	// ctr container restore: the same refusal reaches ctr.
	out, err := d.CtrErr("container", "restore", "--live", "--rw", "mg-ctr", cref)
	if err == nil {
		d.T.Fatalf("ctr container restore on an A100 host succeeded:\n%s", out)
	}
	harness.AssertGPURefusal(d.T, "ctr container restore", out)
	d.AssertNoTask("mg-ctr")
	d.AssertNoRestore("mg-ctr")

	// The original was not touched: same process, running and ticking.
	if got := d.TaskPid("mg"); got != pid {
		d.T.Fatalf("original's pid changed from %d to %d", pid, got)
	}
	d.AssertRunsOn("mg")
	if p, err := fakecuda.ReadPage(pid); err != nil || p.State != 0 {
		d.T.Fatalf("original's CUDA state %+v (%v), want running", p, err)
	}

	// The refusal was the host's: with the H100 back, the checkpoint restores.
	if err := os.Remove(gpus); err != nil {
		d.T.Fatal(err)
	}
	task, err := c.NewTask(ctx, cio.LogFile(d.LogPath("mg-go")), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		d.T.Fatalf("restore on the H100 host: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.T.Fatalf("start restored mg-go: %v\n%s", err, harness.LastLines(d.Log(), 30))
	}
	d.WaitTicks("mg-go", 3)
	harness.AssertContinues(d.T, d.LogPath("mg-go"), before)
	d.Remove("mg-go")
	d.Remove("mg-ctr")
	d.Remove("mg")
}

// testShimKilledWhileLocked: the shim is SIGKILLed while the CUDA
// checkpoint of the task is in flight (the fake driver delays it), so the
// application is CUDA-locked when the shim dies.
func testShimKilledWhileLocked(d *harness.Daemon, _ string) {
	d.RunApp("skl")
	pid := d.TaskPid("skl")
	fault := filepath.Join(d.Faults, fmt.Sprintf("checkpoint.%d", pid))
	if err := os.WriteFile(fault, []byte("delay 10000\n"), 0o644); err != nil {
		d.T.Fatal(err)
	}
	defer os.Remove(fault)
	d.KillShimDuringCheckpoint("skl", pid, func() bool {
		p, err := fakecuda.ReadPage(pid)
		return err == nil && p.State == 1
	})
}

// testShimKilledWhileCheckpointed: the shim is SIGKILLed during the dump
// (a runc wrapper, the runc option BinaryName, stalls `runc checkpoint`),
// so the application's CUDA state is checkpointed when the shim dies.
func testShimKilledWhileCheckpointed(d *harness.Daemon, _ string) {
	c := d.NewContainer("skc", &options.Options{BinaryName: d.StallingRunc("checkpoint")})
	d.StartApp(c)
	pid := d.TaskPid("skc")
	d.KillShimDuringCheckpoint("skc", pid, func() bool {
		p, err := fakecuda.ReadPage(pid)
		return err == nil && p.State == 2
	})
}

// testShimKilledWhileFrozen: the shim is SIGKILLed before it could thaw
// the task that containerd paused for the checkpoint (the runc wrapper
// stalls `runc resume`), so the task's cgroup is frozen when the shim dies.
func testShimKilledWhileFrozen(d *harness.Daemon, _ string) {
	wrapper := d.StallingRunc("resume")
	c := d.NewContainer("skf", &options.Options{BinaryName: wrapper})
	d.StartApp(c)
	pid := d.TaskPid("skf")
	d.KillShimDuringCheckpoint("skf", pid, func() bool {
		_, err := os.Stat(wrapper + ".stalled")
		return err == nil && procfs.Frozen(pid)
	})
}
