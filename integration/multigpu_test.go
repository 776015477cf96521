package integration

// Multi-GPU hosts with the fake driver: the fake NVML reports several GPUs
// (CRYO_FAKE_GPUS), a container sees the GPUs whose /dev/nvidiaN its spec
// gives it (stand-in nodes, the null device), and the fake driver refuses
// what driver 580 refuses: a restore whose GPU pairs are not a one-to-one
// map over exactly the GPUs a process sees. cryo-runc with the real runc and
// CRIU.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// fakeHost is a fake GPU host of H100s, GPU i at /dev/nvidia<i>.
type fakeHost struct{ fakecuda.Host }

func newFakeHost(n int, prefix string) fakeHost { return fakeHost{fakecuda.NewHost(n, prefix)} }

// env points cryo at the fake driver on this host.
func (h fakeHost) env(t *testing.T) []string {
	return append(fakeDriverEnv(t, ""), "CRYO_FAKE_GPUS="+h.GPUs, "CRYO_RUNC=/usr/sbin/runc")
}

// mgContainer is a fakecuda-app container run by cryo-runc.
type mgContainer struct {
	t                     *testing.T
	host                  fakeHost
	dir, bundle, root, id string
	out                   *testsupport.Buffer
}

// newMGContainer prepares a container that is given the GPUs gpus of host
// (by index); appEnv goes into the container's environment.
func newMGContainer(t *testing.T, host fakeHost, gpus []int, appEnv ...string) *mgContainer {
	requireRoot(t)
	dir := t.TempDir()
	c := &mgContainer{t: t, host: host, dir: dir, bundle: rwBundle(t, filepath.Join(dir, "bundle")),
		root: filepath.Join(dir, "runc-root"), id: fmt.Sprintf("cryo-mg-%d-%d", os.Getpid(), time.Now().UnixNano()%100000)}
	c.edit(func(s *specs.Spec) {
		s.Process.Env = append(s.Process.Env, append([]string{"CRYO_FAKE_GPUS=" + host.GPUs}, appEnv...)...)
	})
	c.give(gpus...)
	t.Cleanup(func() { runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "delete", "-f", c.id) })
	return c
}

func (c *mgContainer) edit(f func(*specs.Spec)) {
	path := filepath.Join(c.bundle, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		c.t.Fatal(err)
	}
	f(&s)
	if data, err = json.Marshal(&s); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// give makes the spec name the GPUs gpus (as a device plugin or CDI does):
// their stand-in nodes and a device-cgroup rule for them (giveStandIns).
func (c *mgContainer) give(gpus ...int) {
	c.edit(func(s *specs.Spec) { giveStandIns(s, gpus...) })
}

func (c *mgContainer) cryoRunc(env []string, args ...string) string {
	c.t.Helper()
	return run(c.t, 2*time.Minute, append(c.host.env(c.t), env...), cryoBin(c.t, "cryo-runc"), append([]string{"--root", c.root}, args...)...)
}

func (c *mgContainer) start() {
	c.t.Helper()
	c.out = rwRunDetached(c.t, c.host.env(c.t), cryoBin(c.t, "cryo-runc"), "--root", c.root, "run", "-d", "--bundle", c.bundle, c.id)
	c.waitTicks(3)
}

func (c *mgContainer) waitTicks(n int) {
	c.t.Helper()
	waitFor(c.t, 20*time.Second, "tick "+strconv.Itoa(n), func() bool {
		if strings.Contains(c.out.String(), "sum=BAD") {
			c.t.Fatalf("the app lost its device memory:\n%s", c.out)
		}
		return rwLastTick(c.out.String()) >= n
	})
}

// checkpoint stops the container into a new image directory.
func (c *mgContainer) checkpoint(name string) string {
	c.t.Helper()
	img := filepath.Join(c.dir, name)
	c.cryoRunc(nil, "checkpoint", "--image-path", img, "--work-path", img+"-work", c.id)
	return img
}

// restore restores img with the spec as it is now and checks that the app
// carries on from where it was.
func (c *mgContainer) restore(img string, env ...string) {
	c.t.Helper()
	before := rwLastTick(c.out.String())
	c.out = rwRunDetached(c.t, append(c.host.env(c.t), env...), cryoBin(c.t, "cryo-runc"), "--root", c.root,
		"restore", "-d", "--image-path", img, "--work-path", img+"-rwork", "--bundle", c.bundle, c.id)
	c.waitTicks(before + 3)
	if first := rwFirstTick(c.out.String()); first <= 1 {
		c.t.Fatalf("the restored app started over:\n%s", c.out)
	}
}

func (c *mgContainer) restoreFails(img string, env ...string) string {
	c.t.Helper()
	out, err := runErr(time.Minute, append(c.host.env(c.t), env...), cryoBin(c.t, "cryo-runc"), "--root", c.root,
		"restore", "-d", "--image-path", img, "--work-path", img+"-fwork", "--bundle", c.bundle, c.id)
	if err == nil {
		c.t.Fatalf("restore succeeded, want a refusal:\n%s", out)
	}
	return out
}

func (c *mgContainer) pid() int {
	c.t.Helper()
	out := run(c.t, 10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "state", c.id)
	var st struct{ Pid int }
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Pid == 0 {
		c.t.Fatalf("runc state: %v %s", err, out)
	}
	return st.Pid
}

// assertOn checks that the app runs on exactly the GPUs want (indices).
func (c *mgContainer) assertOn(want ...int) {
	c.t.Helper()
	assertRunsOn(c.t, c.pid(), c.host, want...)
}

// assertRunsOn checks a fake CUDA process on the GPUs want of h: the
// driver's view (its page), the device files it holds, and its /dev.
func assertRunsOn(t testing.TB, pid int, h fakeHost, want ...int) {
	t.Helper()
	page, err := fakecuda.ReadPage(pid)
	if err != nil {
		t.Fatal(err)
	}
	var got, wantU []string
	for _, g := range page.GPUs {
		got = append(got, g.UUID)
	}
	seen := map[string]bool{}
	for _, w := range want {
		wantU = append(wantU, h.UUIDs[w])
		seen[fmt.Sprintf("nvidia%d", w)] = true
	}
	nodes := sortedNames(seen)
	if strings.Join(got, ",") != strings.Join(wantU, ",") {
		t.Fatalf("pid %d runs on %v, want %v", pid, got, wantU)
	}
	if held := heldNodes(pid); strings.Join(held, ",") != strings.Join(nodes, ",") {
		t.Fatalf("pid %d holds %v open, want %v", pid, held, nodes)
	}
	if dev := devNodes(pid); strings.Join(dev, ",") != strings.Join(nodes, ",") {
		t.Fatalf("the /dev of pid %d has %v, want %v", pid, dev, nodes)
	}
}

// heldNodes are the /dev/nvidiaN a process holds open, by name, sorted.
func heldNodes(pid int) []string {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	seen := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "/dev/nvidia") {
			seen[filepath.Base(l)] = true
		}
	}
	return sortedNames(seen)
}

// devNodes are the nvidiaN entries of a process's /dev.
func devNodes(pid int) []string {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/root/dev", pid))
	seen := map[string]bool{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "nvidia") {
			seen[e.Name()] = true
		}
	}
	return sortedNames(seen)
}

func sortedNames(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func rwFirstTick(s string) int {
	m := fakeTickRE.FindStringSubmatch(s)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// A container given one GPU of a 2-GPU host records only that GPU and the
// app's memory on it; it restores onto the same GPU, then, with a new spec
// that gives it the other GPU, onto that one: the restored container holds
// the new GPU's node and not the old one's.
func TestMultiGPUContainerMovesToOtherGPU(t *testing.T) {
	host := newFakeHost(2, "0b1c2d3e")
	c := newMGContainer(t, host, []int{1})
	c.start()
	c.assertOn(1)
	img := c.checkpoint("img1")
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
	c.restore(img)
	c.assertOn(1)

	img = c.checkpoint("img2")
	c.give(0)
	c.restore(img)
	c.assertOn(0)
	page, _ := fakecuda.ReadPage(c.pid())
	if page.PairsCount != 1 {
		t.Fatalf("the driver got %d GPU pairs, want 1 (the process sees one GPU)", page.PairsCount)
	}
}

// The same on a 4-GPU host: GPU 2 to GPU 3.
func TestMultiGPUFourGPUHost(t *testing.T) {
	host := newFakeHost(4, "4a4a4a4a")
	c := newMGContainer(t, host, []int{2})
	c.start()
	img := c.checkpoint("img")
	c.give(3)
	c.restore(img)
	c.assertOn(3)
}

// A container with both GPUs (memory on both) restores as it was, and with
// them swapped by a one-pair map that cryo completes; a map onto a GPU the
// container will not have is refused before runc restores anything.
func TestMultiGPUTwoGPUContainer(t *testing.T) {
	host := newFakeHost(2, "2b2b2b2b")
	c := newMGContainer(t, host, []int{0, 1}, "FAKECUDA_SPREAD=1")
	c.start()
	c.assertOn(0, 1)
	img := c.checkpoint("img1")
	c.restore(img)
	c.assertOn(0, 1)

	img = c.checkpoint("img2")
	c.restore(img, "CRYO_GPU_MAP="+host.UUIDs[0]+"="+host.UUIDs[1])
	c.assertOn(1, 0)
	page, _ := fakecuda.ReadPage(c.pid())
	if page.PairsCount != 2 {
		t.Fatalf("the driver got %d pairs, want 2", page.PairsCount)
	}

	img = c.checkpoint("img3")
	c.give(0)
	out := c.restoreFails(img)
	wantIn(t, out, "saw 2× NVIDIA H100 80GB HBM3", "exactly 2 GPU(s)", "nothing was restored")
}

// A checkpoint of one GPU of a 2-GPU host restores on a 1-GPU host (other
// UUIDs): its needs count only what the container used.
func TestMultiGPUToOneGPUHost(t *testing.T) {
	two := newFakeHost(2, "3c3c3c3c")
	c := newMGContainer(t, two, []int{1})
	c.start()
	img := c.checkpoint("img")
	one := newFakeHost(1, "5d5d5d5d")
	c.host = one
	c.give(0)
	c.restore(img)
	page, err := fakecuda.ReadPage(c.pid())
	if err != nil || len(page.GPUs) != 1 || page.GPUs[0].UUID != one.UUIDs[0] {
		t.Fatalf("restored onto %+v (%v), want %s", page.GPUs, err, one.UUIDs[0])
	}
}

// Bare processes: one that sees both GPUs of the host takes a one-pair map
// completed into a swap; a map onto a GPU the host lacks is refused with
// the process left as it was (the checkpoint unchanged, no restore).
func TestMultiGPUBarePartialMap(t *testing.T) {
	requireRoot(t)
	host := newFakeHost(2, "6e6e6e6e")
	env := append(host.env(t), "CRYO_FAKE_GPUS="+host.GPUs)
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	waitFor(t, 10*time.Second, "the dumped process to go", func() bool { return !p.alive() })

	out := bareCryoFails(t, env, "restore", "--dir", img, "--gpu-map", host.UUIDs[0]+"=GPU-ffffffff-0000-4000-8000-000000000009")
	wantIn(t, out, "GPU-ffffffff-0000-4000-8000-000000000009", "not among the GPUs", "nothing was restored")

	before := p.lastTick(t)
	pid := run(t, bareTimeout, env, cryoBin(t, "cryo"), "restore", "--dir", img, "--gpu-map", host.UUIDs[0]+"="+host.UUIDs[1])
	_ = pid
	p.waitTicks(t, before+3)
	page, err := fakecuda.ReadPage(p.pid)
	if err != nil || len(page.GPUs) != 2 || page.GPUs[0].UUID != host.UUIDs[1] || page.GPUs[1].UUID != host.UUIDs[0] {
		t.Fatalf("after the swap the app runs on %+v (%v)", page.GPUs, err)
	}
}

// An NCCL job whose ranks use CUDA IPC is refused before anything is
// suspended, and both ranks keep computing; with the environment that keeps
// NCCL on sockets, the same job checkpoints.
func TestMultiGPUNCCLIPCRefused(t *testing.T) {
	requireRoot(t)
	host := newFakeHost(2, "7f7f7f7f")
	libDir := filepath.Dir(fakeFile(t, "libcuda.so.1"))
	app := fakeFile(t, "fakecuda-app")
	job := func(extra ...string) *bareProc {
		env := append(host.env(t), "CRYO_FAKE_GPUS="+host.GPUs, "LD_LIBRARY_PATH="+libDir, "FAKECUDA_NCCL=1")
		env = append(env, extra...)
		ranks := fmt.Sprintf("CUDA_VISIBLE_DEVICES=0 %s 50 & CUDA_VISIBLE_DEVICES=1 %s 50 & wait", app, app)
		p := startBare(t, env, nil, "sh -c '"+ranks+"' </dev/null")
		p.waitTicks(t, 6)
		kids := bareChildren(t, p.pid)
		t.Cleanup(func() {
			for _, k := range kids {
				syscall.Kill(k, syscall.SIGKILL)
			}
		})
		return p
	}
	p := job()
	ranks := bareChildren(t, p.pid)
	out := bareCryoFails(t, host.env(t), "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", filepath.Join(t.TempDir(), "img"), "--leave-running")
	wantIn(t, out, "CUDA IPC", "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_CUMEM_ENABLE=0", "nothing was suspended")
	for _, r := range ranks {
		page, err := fakecuda.ReadPage(r)
		if err != nil || page.Locks != 0 || page.State != 0 {
			t.Fatalf("rank %d was touched: %+v %v", r, page, err)
		}
	}
	before := p.lastTick(t)
	p.waitTicks(t, before+4)

	safe := job("NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_CUMEM_ENABLE=0")
	bareCryo(t, host.env(t), "checkpoint", "--pid", strconv.Itoa(safe.pid), "--dir", filepath.Join(t.TempDir(), "img"), "--leave-running")
	before = safe.lastTick(t)
	safe.waitTicks(t, before+4)
}

// bareChildren are the children of pid.
func bareChildren(t *testing.T, pid int) []int {
	t.Helper()
	var kids []int
	waitFor(t, 10*time.Second, "the ranks", func() bool {
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
