package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// A container given one GPU of a 2-GPU host records only that GPU and the
// app's memory on it; it restores onto the same GPU, then, with a new spec
// that gives it the other GPU, onto that one: the restored container holds
// the new GPU's node and not the old one's.
func TestMultiGPUContainerMovesToOtherGPU(t *testing.T) {
	host := harness.NewFakeHost(2, "0b1c2d3e")
	c := harness.NewMGContainer(t, host, []int{1})
	c.Start()
	c.AssertOn(1)
	img := c.Checkpoint("img1")
	m, err := manifest.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	p := m.Processes
	if len(p) != 1 || len(p[0].GPUs) != 1 || p[0].GPUs[0].UUID != host.UUIDs[1] || p[0].GPUs[0].Memory != 1<<20 || p[0].Evidence != "device files" {
		t.Fatalf("manifest processes: %+v", p)
	}
	if len(m.Needs) != 1 || m.Needs[0].UUID != host.UUIDs[1] {
		t.Fatalf("needs must name only the GPU the container used: %+v", m.Needs)
	}
	c.Restore(img)
	c.AssertOn(1)

	img = c.Checkpoint("img2")
	c.Give(0)
	c.Restore(img)
	c.AssertOn(0)
	page, _ := fakecuda.ReadPage(c.PID())
	if page.PairsCount != 1 {
		t.Fatalf("the driver got %d GPU pairs, want 1 (the process sees one GPU)", page.PairsCount)
	}
}

// The same on a 4-GPU host: GPU 2 to GPU 3.
func TestMultiGPUFourGPUHost(t *testing.T) {
	host := harness.NewFakeHost(4, "4a4a4a4a")
	c := harness.NewMGContainer(t, host, []int{2})
	c.Start()
	img := c.Checkpoint("img")
	c.Give(3)
	c.Restore(img)
	c.AssertOn(3)
}

// A container with both GPUs (memory on both) restores as it was, and with
// them swapped by a one-pair map that cryo completes; a map onto a GPU the
// container will not have is refused before runc restores anything.
func TestMultiGPUTwoGPUContainer(t *testing.T) {
	host := harness.NewFakeHost(2, "2b2b2b2b")
	c := harness.NewMGContainer(t, host, []int{0, 1}, "FAKECUDA_SPREAD=1")
	c.Start()
	c.AssertOn(0, 1)
	img := c.Checkpoint("img1")
	c.Restore(img)
	c.AssertOn(0, 1)

	img = c.Checkpoint("img2")
	c.Restore(img, "CRYO_GPU_MAP="+host.UUIDs[0]+"="+host.UUIDs[1])
	c.AssertOn(1, 0)
	page, _ := fakecuda.ReadPage(c.PID())
	if page.PairsCount != 2 {
		t.Fatalf("the driver got %d pairs, want 2", page.PairsCount)
	}

	img = c.Checkpoint("img3")
	c.Give(0)
	out := c.RestoreFails(img)
	harness.WantIn(t, out, "saw 2× NVIDIA H100 80GB HBM3", "exactly 2 GPU(s)", "nothing was restored")
}

// A checkpoint of one GPU of a 2-GPU host restores on a 1-GPU host (other
// UUIDs): its needs count only what the container used.
func TestMultiGPUToOneGPUHost(t *testing.T) {
	two := harness.NewFakeHost(2, "3c3c3c3c")
	c := harness.NewMGContainer(t, two, []int{1})
	c.Start()
	img := c.Checkpoint("img")
	one := harness.NewFakeHost(1, "5d5d5d5d")
	c.Host = one
	c.Give(0)
	c.Restore(img)
	page, err := fakecuda.ReadPage(c.PID())
	if err != nil || len(page.GPUs) != 1 || page.GPUs[0].UUID != one.UUIDs[0] {
		t.Fatalf("restored onto %+v (%v), want %s", page.GPUs, err, one.UUIDs[0])
	}
}

// Bare processes: one that sees both GPUs of the host takes a one-pair map
// completed into a swap; a map onto a GPU the host lacks is refused with
// the process left as it was (the checkpoint unchanged, no restore).
func TestMultiGPUBarePartialMap(t *testing.T) {
	harness.RequireRoot(t)
	host := harness.NewFakeHost(2, "6e6e6e6e")
	env := append(host.Env(t), "CRYO_FAKE_GPUS="+host.GPUs)
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WaitFor(t, 10*time.Second, "the dumped process to go", func() bool { return !p.Alive() })

	out := harness.BareCryoFails(t, env, "restore", "--dir", img, "--gpu-map", host.UUIDs[0]+"=GPU-ffffffff-0000-4000-8000-000000000009")
	harness.WantIn(t, out, "GPU-ffffffff-0000-4000-8000-000000000009", "not among the GPUs", "nothing was restored")

	before := p.LastTick(t)
	pid := harness.Run(t, harness.BareTimeout, env, harness.CryoBin(t, "cryo"), "restore", "--dir", img, "--gpu-map", host.UUIDs[0]+"="+host.UUIDs[1])
	_ = pid
	p.WaitTicks(t, before+3)
	page, err := fakecuda.ReadPage(p.PID)
	if err != nil || len(page.GPUs) != 2 || page.GPUs[0].UUID != host.UUIDs[1] || page.GPUs[1].UUID != host.UUIDs[0] {
		t.Fatalf("after the swap the app runs on %+v (%v)", page.GPUs, err)
	}
}

// An NCCL job whose ranks use CUDA IPC is refused before anything is
// suspended, and both ranks keep computing; with the environment that keeps
// NCCL on sockets, the same job checkpoints.
func TestMultiGPUNCCLIPCRefused(t *testing.T) {
	harness.RequireRoot(t)
	host := harness.NewFakeHost(2, "7f7f7f7f")
	libDir := filepath.Dir(harness.FakeFile(t, "libcuda.so.1"))
	app := harness.FakeFile(t, "fakecuda-app")
	job := func(extra ...string) *harness.BareProc {
		env := append(host.Env(t), "CRYO_FAKE_GPUS="+host.GPUs, "LD_LIBRARY_PATH="+libDir, "FAKECUDA_NCCL=1")
		env = append(env, extra...)
		ranks := fmt.Sprintf("CUDA_VISIBLE_DEVICES=0 %s 50 & CUDA_VISIBLE_DEVICES=1 %s 50 & wait", app, app)
		p := harness.StartBare(t, env, nil, "sh -c '"+ranks+"' </dev/null")
		p.WaitTicks(t, 6)
		kids := bareChildren(t, p.PID)
		t.Cleanup(func() {
			for _, k := range kids {
				syscall.Kill(k, syscall.SIGKILL)
			}
		})
		return p
	}
	p := job()
	ranks := bareChildren(t, p.PID)
	out := harness.BareCryoFails(t, host.Env(t), "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", filepath.Join(t.TempDir(), "img"), "--leave-running")
	harness.WantIn(t, out, "CUDA IPC", "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0", "nothing was suspended")
	for _, r := range ranks {
		page, err := fakecuda.ReadPage(r)
		if err != nil || page.Locks != 0 || page.State != 0 {
			t.Fatalf("rank %d was touched: %+v %v", r, page, err)
		}
	}
	before := p.LastTick(t)
	p.WaitTicks(t, before+4)

	safe := job("NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_CUMEM_ENABLE=0")
	harness.BareCryo(t, host.Env(t), "checkpoint", "--pid", strconv.Itoa(safe.PID), "--dir", filepath.Join(t.TempDir(), "img"), "--leave-running")
	before = safe.LastTick(t)
	safe.WaitTicks(t, before+4)
}

// bareChildren are the children of pid.
func bareChildren(t *testing.T, pid int) []int {
	t.Helper()
	var kids []int
	harness.WaitFor(t, 10*time.Second, "the ranks", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		kids = nil
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			kids = append(kids, n)
		}
		return len(kids) == 2
	})
	return kids
}
