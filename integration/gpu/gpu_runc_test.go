package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

func newGPUContainer(t *testing.T, runc, id string) *harness.RuncContainer {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	gpuRootfs(t, bundle)
	gpuSpec(t, bundle, "/bin/cudamem", harness.GPUMiB(), "100")
	c := &harness.RuncContainer{T: t, Runc: runc, Root: filepath.Join(dir, "runc-root"), Bundle: bundle, ID: id, Log: &testsupport.Buffer{}}
	t.Cleanup(func() {
		_, _ = harness.RunErr(30*time.Second, nil, runc, "--root", c.Root, "delete", "--force", c.ID)
	})
	return c
}

// TestGPURuncCheckpointRestore: cryo-runc checkpoint then restore; a restore
// with an explicit GPU UUID map onto the same GPU; a leave-running
// checkpoint; and the raw runc + driver sequence side by side.
func TestGPURuncCheckpointRestore(t *testing.T) {
	gpuOrSkip(t)
	wrap := harness.CryoBin(t, "cryo-runc")
	c := newGPUContainer(t, wrap, "cryo-gpu-runc")
	c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
	c.TicksAfter(2, "first ticks")

	img := filepath.Join(t.TempDir(), "img")
	report(t, "cryo-runc checkpoint", harness.Timed(t, nil, wrap, "--root", c.Root, "checkpoint", "--image-path", img, c.ID))
	n := harness.LastTick(t, c.Log.String())
	report(t, "cryo-runc restore", c.Start("restore", "-d", "--image-path", img, "--bundle", c.Bundle, c.ID))
	n = c.TicksAfter(n, "ticks after restore")
	t.Logf("restored; tick %d", n)

	// Leave-running: the container goes on, and its CUDA state is resumed.
	img2 := filepath.Join(t.TempDir(), "img2")
	atCkpt := harness.LastTick(t, c.Log.String())
	report(t, "cryo-runc checkpoint --leave-running", harness.Timed(t, nil, wrap, "--root", c.Root, "checkpoint", "--leave-running", "--image-path", img2, c.ID))
	c.TicksAfter(harness.LastTick(t, c.Log.String()), "ticks after a leave-running checkpoint")

	// Restore the leave-running image onto the same GPU through an explicit
	// UUID map (the driver's gpuPairs), after stopping the original.
	harness.Run(t, time.Minute, nil, wrap, "--root", c.Root, "kill", c.ID, "KILL")
	harness.WaitFor(t, 30*time.Second, "the container to stop", func() bool {
		out, _ := harness.RunErr(10*time.Second, nil, wrap, "--root", c.Root, "state", c.ID)
		return strings.Contains(out, `"stopped"`) || !strings.Contains(out, c.ID)
	})
	harness.Run(t, time.Minute, nil, wrap, "--root", c.Root, "delete", "--force", c.ID)
	uuid := firstGPUUUID(t)
	c.Log = &testsupport.Buffer{}
	os.Setenv("CRYO_GPU_MAP", uuid+"="+uuid)
	c.Start("restore", "-d", "--image-path", img2, "--bundle", c.Bundle, c.ID)
	os.Unsetenv("CRYO_GPU_MAP")
	c.TicksAfter(atCkpt, "ticks after a restore with a GPU UUID map")
	runcBaseline(t)
}

// runcBaseline times the raw sequence: the driver's suspend of the
// container's process, then plain runc checkpoint; plain runc restore, then
// the driver's resume.
func runcBaseline(t *testing.T) {
	cryo := harness.CryoBin(t, "cryo")
	runc := rawRunc()
	c := newGPUContainer(t, runc, "cryo-gpu-raw")
	c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
	c.TicksAfter(2, "raw first ticks")
	pid := strconv.Itoa(c.PID())
	img := filepath.Join(t.TempDir(), "raw-img")
	d := harness.Timed(t, nil, cryo, "cuda", "suspend", pid)
	d += harness.Timed(t, nil, runc, "--root", c.Root, "checkpoint", "--image-path", img, c.ID)
	report(t, "raw checkpoint (driver + runc)", d)
	n := harness.LastTick(t, c.Log.String())
	d = c.Start("restore", "-d", "--image-path", img, "--bundle", c.Bundle, c.ID)
	d += harness.Timed(t, nil, cryo, "cuda", "resume", strconv.Itoa(c.PID()))
	report(t, "raw restore (runc + driver)", d)
	c.TicksAfter(n, "raw ticks after restore")
}

// firstGPUUUID is the UUID of GPU 0, from nvidia-smi.
func firstGPUUUID(t *testing.T) string {
	out := harness.Run(t, 30*time.Second, nil, "nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader")
	return strings.TrimSpace(strings.Split(out, "\n")[0])
}
