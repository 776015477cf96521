package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
)

const gpuImage = "localhost/cryo/cudamem:test"

// TestGPUContainerd runs the CUDA workload in containerd 2.x with the cryo
// shim, on the real driver: `ctr task checkpoint --exit`, a restore through
// the Go client; then `ctr container checkpoint` and `ctr container restore`.
// The workload verifies its device memory and GPU counter on every tick.
func TestGPUContainerd(t *testing.T) {
	gpuOrSkip(t)
	d := startDaemonWith(t, ctrdVersions[1], true)
	dir := filepath.Join(d.dir, "gpu-image")
	root := gpuRootfs(t, dir)
	archive := filepath.Join(dir, "image.tar")
	buildImageTarAs(t, root, archive, gpuImage, []string{"/bin/cudamem"})
	d.ctr("images", "import", "--all-platforms", archive)
	_ = os.MkdirAll(filepath.Join(d.dir, "logs"), 0o755)

	// ctr task checkpoint --exit, then restore into the same container.
	c := d.newGPUContainer(t, "gpu")
	d.startGPUTask(t, c)
	waitTicks(t, func() string { return readFile(d.logPath("gpu")) }, 2, "first ticks in containerd")
	start := time.Now()
	ref, _ := d.taskCheckpoint("gpu", "--exit")
	report(t, "ctr task checkpoint --exit", time.Since(start))
	d.waitStopped("gpu")
	n := lastTick(t, readFile(d.logPath("gpu")))
	_ = os.Rename(d.logPath("gpu"), d.logPath("gpu")+".before")
	start = time.Now()
	d.restoreTask(ref, "gpu")
	got := waitTicks(t, func() string { return readFile(d.logPath("gpu")) }, 0, "ticks after restore")
	report(t, "containerd restore to first output", time.Since(start))
	if got <= n {
		t.Fatalf("restored workload printed tick %d, want > %d (the counter restarted?)", got, n)
	}

	// ctr container checkpoint --task --rw, then ctr container restore.
	cref := "localhost/cryo/checkpoint:gpu"
	before := lastTick(t, readFile(d.logPath("gpu")))
	start = time.Now()
	d.ctr("container", "checkpoint", "--task", "--rw", "gpu", cref)
	report(t, "ctr container checkpoint --task", time.Since(start))
	d.remove("gpu")
	start = time.Now()
	d.ctr("container", "restore", "--live", "--rw", "gpu-restored", cref)
	report(t, "ctr container restore", time.Since(start))
	d.attach("gpu-restored")
	waitTicks(t, func() string { return readFile(d.logPath("gpu-restored")) }, 0, "ticks after ctr container restore")
	if first := firstTick(readFile(d.logPath("gpu-restored"))); first <= before-1 {
		t.Fatalf("ctr container restore: first tick %d, want > %d", first, before-1)
	}
	d.remove("gpu-restored")
}

// newGPUContainer creates a container of the CUDA image on the cryo runtime
// with the GPU device nodes and the host's network.
func (d *daemon) newGPUContainer(t *testing.T, id string) client.Container {
	return d.newGPUContainerNet(t, id, true)
}

func (d *daemon) startGPUTask(t *testing.T, c client.Container) {
	t.Helper()
	ctx := namespacedCtx()
	task, err := c.NewTask(ctx, cio.LogFile(d.logPath(c.ID())))
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

// firstTick is the first tick number of a workload's output.
func firstTick(out string) int {
	m := tickRe.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n := 0
	for _, c := range m[1] {
		n = n*10 + int(c-'0')
	}
	return n
}
