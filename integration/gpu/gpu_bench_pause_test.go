package gpu

import (
	"path/filepath"
	"strconv"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// pause: the GPU-free pause of the CUDA workload at mib MiB in a cryo-runc
// container. It measures the pause's wall time, the time until the GPU
// memory is back at its baseline (from the start of the pause), the
// resume command, and the time from the resume to the workload's first
// output. These compare with the raw restore's "restore to first output":
// a paused container comes back in about the driver's copy time, without
// CRIU.
func (b *bench) pause(mib int) {
	t := b.t
	base := gpuMemoryUsedMiB(t)
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	gpuRootfs(t, bundle)
	gpuSpec(t, bundle, "/bin/cudamem", strconv.Itoa(mib), "20")
	c := &harness.RuncContainer{T: t, Runc: harness.CryoBin(t, "cryo-runc"), Root: filepath.Join(dir, "runc-root"), Bundle: bundle, ID: "cryo-bench-pause", Log: &testsupport.Buffer{}}
	c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
	defer c.Remove()
	c.TicksAfter(1, "first ticks")

	free := watchGPUFree(t, base)
	b.row("cudamem", mib, "cryo pause", harness.Timed(t, nil, c.Runc, "--root", c.Root, "pause", c.ID).Seconds())
	d := free()
	if d < 0 {
		t.Fatalf("the pause did not free the GPU memory: %d MiB used, baseline %d", gpuMemoryUsedMiB(t), base)
	}
	b.row("cudamem", mib, "cryo pause GPU free", d.Seconds())
	if st := c.Status(); st != "paused" {
		t.Fatalf("container is %s after the pause, want paused", st)
	}

	n := harness.LastTick(t, c.Log.String())
	start := time.Now()
	b.row("cudamem", mib, "cryo resume command", harness.Timed(t, nil, c.Runc, "--root", c.Root, "resume", c.ID).Seconds())
	waitTickFast(t, c, n)
	b.row("cudamem", mib, "cryo resume to first output", time.Since(start).Seconds())
}
