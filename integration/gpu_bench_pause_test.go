package integration

import (
	"path/filepath"
	"strconv"
	"time"

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
	c := &runcContainer{t: t, runc: cryoBin(t, "cryo-runc"), root: filepath.Join(dir, "runc-root"), bundle: bundle, id: "cryo-bench-pause", log: &testsupport.Buffer{}}
	c.start("run", "-d", "--bundle", c.bundle, c.id)
	defer c.remove()
	c.ticksAfter(1, "first ticks")

	free := watchGPUFree(t, base)
	b.row("cudamem", mib, "cryo pause", timed(t, nil, c.runc, "--root", c.root, "pause", c.id).Seconds())
	d := free()
	if d < 0 {
		t.Fatalf("the pause did not free the GPU memory: %d MiB used, baseline %d", gpuMemoryUsedMiB(t), base)
	}
	b.row("cudamem", mib, "cryo pause GPU free", d.Seconds())
	if st := c.status(); st != "paused" {
		t.Fatalf("container is %s after the pause, want paused", st)
	}

	n := lastTick(t, c.log.String())
	start := time.Now()
	b.row("cudamem", mib, "cryo resume command", timed(t, nil, c.runc, "--root", c.root, "resume", c.id).Seconds())
	waitTickFast(t, c, n)
	b.row("cudamem", mib, "cryo resume to first output", time.Since(start).Seconds())
}
