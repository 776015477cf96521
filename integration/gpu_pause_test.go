package integration

import (
	"encoding/json"
	"testing"
	"time"
)

// TestGPUPauseResume: `cryo-runc pause` of a GPU container suspends its CUDA
// state (the GPU memory goes back to the baseline) and freezes it; `cryo-runc
// resume` thaws it and restores CUDA, and the workload's device memory
// checks on (verify=OK). With CRYO_GPU_FREE_PAUSE=0 the pause freezes only,
// and the GPU memory stays held.
func TestGPUPauseResume(t *testing.T) {
	gpuOrSkip(t)
	wrap := cryoBin(t, "cryo-runc")
	base := gpuMemoryUsedMiB(t)
	c := newGPUContainer(t, wrap, "cryo-gpu-pause")
	c.start("run", "-d", "--bundle", c.bundle, c.id)
	n := c.ticksAfter(2, "first ticks")

	free := watchGPUFree(t, base)
	report(t, "cryo-runc pause (GPU-free)", timed(t, nil, wrap, "--root", c.root, "pause", c.id))
	d := free()
	if d < 0 {
		t.Fatalf("the pause did not free the GPU memory: %d MiB used, %d MiB before the container", gpuMemoryUsedMiB(t), base)
	}
	report(t, "cryo-runc pause: GPU memory free", d)
	c.assertPaused(n)

	start := time.Now()
	report(t, "cryo-runc resume", timed(t, nil, wrap, "--root", c.root, "resume", c.id))
	n = c.ticksAfter(lastTick(t, c.log.String()), "ticks after the resume")
	report(t, "cryo-runc resume to first output", time.Since(start))
	if used := gpuMemoryUsedMiB(t); used <= base+64 {
		t.Fatalf("after the resume the GPU holds %d MiB (baseline %d): CUDA did not get its memory back", used, base)
	}

	// Freeze-only: the configuration turns the GPU-free pause off.
	freezeOnly := []string{"CRYO_GPU_FREE_PAUSE=0"}
	timed(t, freezeOnly, wrap, "--root", c.root, "pause", c.id)
	c.assertPaused(n)
	if used := gpuMemoryUsedMiB(t); used <= base+64 {
		t.Fatalf("a freeze-only pause freed the GPU memory (%d MiB used, baseline %d)", used, base)
	}
	timed(t, freezeOnly, wrap, "--root", c.root, "resume", c.id)
	c.ticksAfter(lastTick(t, c.log.String()), "ticks after a freeze-only pause")
}

// assertPaused checks that runc reports the container paused and that it
// prints no tick past n meanwhile.
func (c *runcContainer) assertPaused(n int) {
	c.t.Helper()
	if st := c.status(); st != "paused" {
		c.t.Fatalf("container %s is %s, want paused", c.id, st)
	}
	last := lastTick(c.t, c.log.String())
	time.Sleep(500 * time.Millisecond)
	if now := lastTick(c.t, c.log.String()); now != last || now < n {
		c.t.Fatalf("container %s ticked %d→%d while paused", c.id, last, now)
	}
}

// status is runc's state of the container: running, paused, stopped.
func (c *runcContainer) status() string {
	c.t.Helper()
	out := run(c.t, 30*time.Second, nil, c.runc, "--root", c.root, "state", c.id)
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		c.t.Fatalf("runc state: %v: %s", err, out)
	}
	return st.Status
}
