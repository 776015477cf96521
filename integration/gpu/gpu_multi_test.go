package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// gpuUUIDs lists the host's GPUs by index (nvidia-smi), skipping the test
// when there are fewer than n.
func gpuUUIDs(t *testing.T, n int) []string {
	t.Helper()
	gpuOrSkip(t)
	out := harness.Run(t, 30*time.Second, nil, "nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader")
	uuids := strings.Fields(out)
	if len(uuids) < n {
		t.Skipf("this host has %d GPU(s); the test needs %d", len(uuids), n)
	}
	return uuids
}

// specGPUs makes a spec give the container the GPUs gpus (by index): their
// device nodes and device-cgroup rules, as a device plugin or CDI does.
func specGPUs(t *testing.T, s *specs.Spec, gpus ...int) {
	t.Helper()
	var devs []specs.LinuxDevice
	var rules []specs.LinuxDeviceCgroup
	for _, d := range s.Linux.Devices {
		if !regexp.MustCompile(`^/dev/nvidia[0-9]+$`).MatchString(d.Path) {
			devs = append(devs, d)
		}
	}
	for _, r := range s.Linux.Resources.Devices {
		gpu := r.Major != nil && *r.Major == 195 && r.Minor != nil && *r.Minor < 254
		if !gpu {
			rules = append(rules, r)
		}
	}
	for _, g := range gpus {
		d, rule := deviceOf(t, fmt.Sprintf("/dev/nvidia%d", g))
		devs, rules = append(devs, d), append(rules, rule)
	}
	s.Linux.Devices, s.Linux.Resources.Devices = devs, rules
}

// bundleGPUs rewrites a runc bundle's spec to give it GPUs gpus.
func bundleGPUs(t *testing.T, bundle string, gpus ...int) {
	t.Helper()
	s := readSpec(t, bundle)
	specGPUs(t, s, gpus...)
	harness.WriteSpec(t, bundle, s)
}

// moveTo gives a stopped task's next restore the GPUs gpus: the bundle's
// spec for cryo-runc, the container's spec in containerd for the shim.
func moveTo(t *testing.T, task gpuTask, c *harness.RuncContainer, gpus ...int) {
	t.Helper()
	bundleGPUs(t, c.Bundle, gpus...)
	s, ok := task.(*shimTask)
	if !ok {
		return
	}
	ctx := harness.NamespacedCtx()
	ctr, err := s.d.Client.LoadContainer(ctx, s.id)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ctr.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	specGPUs(t, spec, gpus...)
	err = ctr.Update(ctx, client.UpdateContainerOpts(client.WithSpec(spec)))
	if err != nil {
		t.Fatalf("update the spec of %s: %v", s.id, err)
	}
}

// TestGPUMultiMove: a container given GPU 0 is checkpointed and restored
// into the same container with a new spec that gives it GPU 1, through
// cryo-runc and through the shim; its memory and counter carry on there.
func TestGPUMultiMove(t *testing.T) {
	uuids := gpuUUIDs(t, 2)
	for _, f := range gpuFlavors() {
		t.Run(f.name, func(t *testing.T) {
			c := newGPUContainer(t, harness.CryoBin(t, "cryo-runc"), "cryo-gpu-move-"+f.name)
			task := f.start(t, c)
			n := harness.WaitTicks(t, task.Output, 2, "first ticks")
			if on := harness.GpusOf(t, task.PID()); len(on) != 1 || on[0] != uuids[0] {
				t.Fatalf("the workload runs on %v, want GPU 0 %s", on, uuids[0])
			}
			report(t, "checkpoint on GPU 0", task.Checkpoint())
			moveTo(t, task, c, 1)
			report(t, "restore onto GPU 1", task.Restore())
			harness.WaitTicks(t, task.Output, n+2, "ticks on GPU 1")
			if on := harness.GpusOf(t, task.PID()); len(on) != 1 || on[0] != uuids[1] {
				t.Fatalf("after the move the workload runs on %v, want GPU 1 %s", on, uuids[1])
			}
		})
	}
}

// TestGPUMultiBoth: a container given both GPUs (the workload sees two,
// uses GPU 0) restores as it was, then with a one-pair map GPU0=GPU1 that
// cryo completes into a swap: the memory moves to GPU 1. Then a restore
// into a spec with one GPU is refused before runc restores anything.
func TestGPUMultiBoth(t *testing.T) {
	uuids := gpuUUIDs(t, 2)
	wrap := harness.CryoBin(t, "cryo-runc")
	c := newGPUContainer(t, wrap, "cryo-gpu-both")
	bundleGPUs(t, c.Bundle, 0, 1)
	task := runcFlavor("cryo-runc").start(t, c)
	n := harness.WaitTicks(t, task.Output, 2, "first ticks")
	task.Checkpoint()
	task.Restore()
	n = harness.WaitTicks(t, task.Output, n+2, "ticks after the restore as it was")
	if on := harness.GpusOf(t, task.PID()); len(on) != 1 || on[0] != uuids[0] {
		t.Fatalf("the workload runs on %v, want %s", on, uuids[0])
	}

	task.Checkpoint()
	os.Setenv("CRYO_GPU_MAP", uuids[0]+"="+uuids[1])
	report(t, "restore with the GPUs swapped", task.Restore())
	os.Unsetenv("CRYO_GPU_MAP")
	n = harness.WaitTicks(t, task.Output, n+2, "ticks after the swap")
	if on := harness.GpusOf(t, task.PID()); len(on) != 1 || on[0] != uuids[1] {
		t.Fatalf("after the swap the workload runs on %v, want %s", on, uuids[1])
	}

	img := filepath.Join(t.TempDir(), "img")
	c.Checkpoint(img)
	bundleGPUs(t, c.Bundle, 1)
	out, err := harness.RunErr(time.Minute, nil, wrap, "--root", c.Root, "restore", "-d", "--image-path", img, "--bundle", c.Bundle, c.ID)
	if err == nil || !strings.Contains(out, "exactly 2 GPU(s)") || !strings.Contains(out, "nothing was restored") {
		t.Fatalf("a restore onto one GPU of a process that saw two: %v\n%s", err, out)
	}
	bundleGPUs(t, c.Bundle, 0, 1)
	c.Restore(img)
	harness.WaitTicks(t, task.Output, n, "ticks after the refused restore was redone")
}
