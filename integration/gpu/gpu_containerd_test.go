package gpu

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestGPUContainerd runs the CUDA workload in containerd 2.x with the cryo
// shim, on the real driver: `ctr task checkpoint --exit`, a restore through
// the Go client; then `ctr container checkpoint` and `ctr container restore`.
// The workload verifies its device memory and GPU counter on every tick.
func TestGPUContainerd(t *testing.T) {
	gpuOrSkip(t)
	d := harness.StartDaemonWith(t, harness.CtrdVersions[1], true)
	dir := filepath.Join(d.Dir, "gpu-image")
	root := gpuRootfs(t, dir)
	archive := filepath.Join(dir, "image.tar")
	harness.BuildImageTarAs(t, root, archive, harness.GPUImage, []string{"/bin/cudamem"})
	d.Ctr("images", "import", "--all-platforms", archive)
	_ = os.MkdirAll(filepath.Join(d.Dir, "logs"), 0o755)

	// ctr task checkpoint --exit, then restore into the same container.
	c := d.NewGPUContainer(t, "gpu")
	d.StartGPUTask(t, c)
	harness.WaitTicks(t, func() string { return harness.ReadFile(d.LogPath("gpu")) }, 2, "first ticks in containerd")
	start := time.Now()
	ref, _ := d.TaskCheckpoint("gpu", "--exit")
	report(t, "ctr task checkpoint --exit", time.Since(start))
	d.WaitStopped("gpu")
	n := harness.LastTick(t, harness.ReadFile(d.LogPath("gpu")))
	_ = os.Rename(d.LogPath("gpu"), d.LogPath("gpu")+".before")
	start = time.Now()
	d.RestoreTask(ref, "gpu")
	got := harness.WaitTicks(t, func() string { return harness.ReadFile(d.LogPath("gpu")) }, 0, "ticks after restore")
	report(t, "containerd restore to first output", time.Since(start))
	if got <= n {
		t.Fatalf("restored workload printed tick %d, want > %d (the counter restarted?)", got, n)
	}

	// ctr container checkpoint --task --rw, then ctr container restore.
	cref := "localhost/cryo/checkpoint:gpu"
	before := harness.LastTick(t, harness.ReadFile(d.LogPath("gpu")))
	start = time.Now()
	d.Ctr("container", "checkpoint", "--task", "--rw", "gpu", cref)
	report(t, "ctr container checkpoint --task", time.Since(start))
	d.Remove("gpu")
	start = time.Now()
	d.Ctr("container", "restore", "--live", "--rw", "gpu-restored", cref)
	report(t, "ctr container restore", time.Since(start))
	d.Attach("gpu-restored")
	harness.WaitTicks(t, func() string { return harness.ReadFile(d.LogPath("gpu-restored")) }, 0, "ticks after ctr container restore")
	if first := harness.FirstTick(harness.ReadFile(d.LogPath("gpu-restored"))); first <= before-1 {
		t.Fatalf("ctr container restore: first tick %d, want > %d", first, before-1)
	}
	d.Remove("gpu-restored")
}
