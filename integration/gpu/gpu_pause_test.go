package gpu

import (
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestGPUPauseResume: `cryo-runc pause` of a GPU container suspends its CUDA
// state (the GPU memory goes back to the baseline) and freezes it; `cryo-runc
// resume` thaws it and restores CUDA, and the workload's device memory
// checks on (verify=OK). With CRYO_GPU_FREE_PAUSE=0 the pause freezes only,
// and the GPU memory stays held.
func TestGPUPauseResume(t *testing.T) {
	gpuOrSkip(t)
	wrap := harness.CryoBin(t, "cryo-runc")
	base := gpuMemoryUsedMiB(t)
	c := newGPUContainer(t, wrap, "cryo-gpu-pause")
	c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
	n := c.TicksAfter(2, "first ticks")

	free := watchGPUFree(t, base)
	report(t, "cryo-runc pause (GPU-free)", harness.Timed(t, nil, wrap, "--root", c.Root, "pause", c.ID))
	d := free()
	if d < 0 {
		t.Fatalf("the pause did not free the GPU memory: %d MiB used, %d MiB before the container", gpuMemoryUsedMiB(t), base)
	}
	report(t, "cryo-runc pause: GPU memory free", d)
	c.AssertPaused(n)

	start := time.Now()
	report(t, "cryo-runc resume", harness.Timed(t, nil, wrap, "--root", c.Root, "resume", c.ID))
	n = c.TicksAfter(harness.LastTick(t, c.Log.String()), "ticks after the resume")
	report(t, "cryo-runc resume to first output", time.Since(start))
	if used := gpuMemoryUsedMiB(t); used <= base+64 {
		t.Fatalf("after the resume the GPU holds %d MiB (baseline %d): CUDA did not get its memory back", used, base)
	}

	// Freeze-only: the configuration turns the GPU-free pause off.
	freezeOnly := []string{"CRYO_GPU_FREE_PAUSE=0"}
	harness.Timed(t, freezeOnly, wrap, "--root", c.Root, "pause", c.ID)
	c.AssertPaused(n)
	if used := gpuMemoryUsedMiB(t); used <= base+64 {
		t.Fatalf("a freeze-only pause freed the GPU memory (%d MiB used, baseline %d)", used, base)
	}
	harness.Timed(t, freezeOnly, wrap, "--root", c.Root, "resume", c.ID)
	c.TicksAfter(harness.LastTick(t, c.Log.String()), "ticks after a freeze-only pause")
}
