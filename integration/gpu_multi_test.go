package integration

// GPU tests for hosts with several GPUs (`make gpu-test` on 2× H200): a
// container moved to another GPU, a container with two GPUs restored as it
// was and with them swapped by a one-pair map, and an NCCL job whose ranks
// share GPU memory refused before anything is suspended. They skip on a
// host with one GPU.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// gpuUUIDs lists the host's GPUs by index (nvidia-smi), skipping the test
// when there are fewer than n.
func gpuUUIDs(t *testing.T, n int) []string {
	t.Helper()
	gpuOrSkip(t)
	out := run(t, 30*time.Second, nil, "nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader")
	uuids := strings.Fields(out)
	if len(uuids) < n {
		t.Skipf("this host has %d GPU(s); the test needs %d", len(uuids), n)
	}
	return uuids
}

// gpusOf returns the UUIDs of the GPUs on which pid holds memory.
func gpusOf(t *testing.T, pid int) []string {
	t.Helper()
	out := run(t, 30*time.Second, nil, "nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader")
	var on []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) == 2 && strings.TrimSpace(f[0]) == strconv.Itoa(pid) {
			on = append(on, strings.TrimSpace(f[1]))
		}
	}
	return on
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
	path := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	specGPUs(t, &s, gpus...)
	writeSpec(t, bundle, &s)
}

// moveTo gives a stopped task's next restore the GPUs gpus: the bundle's
// spec for cryo-runc, the container's spec in containerd for the shim.
func moveTo(t *testing.T, task gpuTask, c *runcContainer, gpus ...int) {
	t.Helper()
	bundleGPUs(t, c.bundle, gpus...)
	s, ok := task.(*shimTask)
	if !ok {
		return
	}
	ctx := namespacedCtx()
	ctr, err := s.d.client.LoadContainer(ctx, s.id)
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
			c := newGPUContainer(t, cryoBin(t, "cryo-runc"), "cryo-gpu-move-"+f.name)
			task := f.start(t, c)
			n := waitTicks(t, task.output, 2, "first ticks")
			if on := gpusOf(t, task.pid()); len(on) != 1 || on[0] != uuids[0] {
				t.Fatalf("the workload runs on %v, want GPU 0 %s", on, uuids[0])
			}
			report(t, "checkpoint on GPU 0", task.checkpoint())
			moveTo(t, task, c, 1)
			report(t, "restore onto GPU 1", task.restore())
			waitTicks(t, task.output, n+2, "ticks on GPU 1")
			if on := gpusOf(t, task.pid()); len(on) != 1 || on[0] != uuids[1] {
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
	wrap := cryoBin(t, "cryo-runc")
	c := newGPUContainer(t, wrap, "cryo-gpu-both")
	bundleGPUs(t, c.bundle, 0, 1)
	task := runcFlavor("cryo-runc").start(t, c)
	n := waitTicks(t, task.output, 2, "first ticks")
	task.checkpoint()
	task.restore()
	n = waitTicks(t, task.output, n+2, "ticks after the restore as it was")
	if on := gpusOf(t, task.pid()); len(on) != 1 || on[0] != uuids[0] {
		t.Fatalf("the workload runs on %v, want %s", on, uuids[0])
	}

	task.checkpoint()
	os.Setenv("CRYO_GPU_MAP", uuids[0]+"="+uuids[1])
	report(t, "restore with the GPUs swapped", task.restore())
	os.Unsetenv("CRYO_GPU_MAP")
	n = waitTicks(t, task.output, n+2, "ticks after the swap")
	if on := gpusOf(t, task.pid()); len(on) != 1 || on[0] != uuids[1] {
		t.Fatalf("after the swap the workload runs on %v, want %s", on, uuids[1])
	}

	img := filepath.Join(t.TempDir(), "img")
	c.checkpoint(img)
	bundleGPUs(t, c.bundle, 1)
	out, err := runErr(time.Minute, nil, wrap, "--root", c.root, "restore", "-d", "--image-path", img, "--bundle", c.bundle, c.id)
	if err == nil || !strings.Contains(out, "exactly 2 GPU(s)") || !strings.Contains(out, "nothing was restored") {
		t.Fatalf("a restore onto one GPU of a process that saw two: %v\n%s", err, out)
	}
	bundleGPUs(t, c.bundle, 0, 1)
	c.restore(img)
	waitTicks(t, task.output, n, "ticks after the refused restore was redone")
}

var allreduceRe = regexp.MustCompile(`(?m)^tick (\d+) rank=(\d+) allreduce=(OK|BAD)`)

// ncclJob is contrib/workloads/allreduce: a launcher and two ranks.
type ncclJob struct {
	t        *testing.T
	log      string
	launcher int
	ranks    []int
}

var ncclPort int

func startNCCLJob(t *testing.T, py *hostPython, env ...string) *ncclJob {
	t.Helper()
	j := &ncclJob{t: t, log: filepath.Join(t.TempDir(), "allreduce.log")}
	ncclPort++ // a fresh port per job: the last one's may linger in TIME_WAIT
	port := strconv.Itoa(29500 + os.Getpid()%300 + ncclPort)
	script := filepath.Join(os.Getenv("CRYO_WORKLOADS"), "allreduce", "allreduce.py")
	args := append(append([]string{}, env...), "PYTHONUNBUFFERED=1", py.exe, script, "2", port, "200", "64")
	cmd := startDetached(t, j.log, "env", args...)
	j.launcher = cmd.Process.Pid
	t.Cleanup(j.kill)
	j.waitOK(4)
	waitFor(t, 30*time.Second, "the ranks", func() bool {
		j.ranks = childPIDs(j.launcher)
		return len(j.ranks) == 2
	})
	return j
}

// waitOK waits until each rank has printed n more correct all-reduces.
func (j *ncclJob) waitOK(n int) {
	j.t.Helper()
	start := j.oks()
	waitFor(j.t, 3*time.Minute, fmt.Sprintf("%d more all-reduces per rank", n), func() bool {
		now := j.oks()
		return now[0] >= start[0]+n && now[1] >= start[1]+n
	})
}

// oks counts each rank's correct all-reduces, failing on a wrong one.
func (j *ncclJob) oks() [2]int {
	out := readFile(j.log)
	var c [2]int
	for _, m := range allreduceRe.FindAllStringSubmatch(out, -1) {
		if m[3] != "OK" {
			j.t.Fatalf("rank %s computed a wrong all-reduce:\n%s", m[2], tail(out, 20))
		}
		if r, _ := strconv.Atoi(m[2]); r < 2 {
			c[r]++
		}
	}
	return c
}

func (j *ncclJob) kill() {
	for _, p := range append(j.ranks, j.launcher) {
		killPid(p)
	}
}

func childPIDs(pid int) []int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	var kids []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		kids = append(kids, n)
	}
	return kids
}

// TestGPUNCCLIPCRefused: a 2-rank NCCL job with NCCL's default transports
// (CUDA IPC between the GPUs) is refused by `cryo checkpoint` and by `cryo
// cuda suspend` before anything is suspended, and both ranks go on
// computing correct all-reduces. The same job with NCCL on sockets
// suspends and resumes in place.
func TestGPUNCCLIPCRefused(t *testing.T) {
	gpuUUIDs(t, 2)
	py := torchPython(t)
	cryo := cryoBin(t, "cryo")
	j := startNCCLJob(t, py)
	out, err := runErr(2*time.Minute, nil, cryo, "checkpoint", "--pid", strconv.Itoa(j.launcher), "--dir", filepath.Join(t.TempDir(), "img"), "--leave-running")
	if err == nil || !strings.Contains(out, "CUDA IPC") || !strings.Contains(out, "NCCL_P2P_DISABLE=1") {
		t.Fatalf("checkpoint of the default NCCL job: %v\n%s", err, out)
	}
	t.Logf("refused as it should be:\n%s", out)
	ranks := []string{strconv.Itoa(j.ranks[0]), strconv.Itoa(j.ranks[1])}
	out, err = runErr(time.Minute, nil, cryo, append([]string{"cuda", "suspend"}, ranks...)...)
	if err == nil || !strings.Contains(out, "CUDA IPC") {
		t.Fatalf("cryo cuda suspend of the default NCCL job: %v\n%s", err, out)
	}
	j.waitOK(5)
	j.kill()

	safe := startNCCLJob(t, py, "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_CUMEM_ENABLE=0")
	ranks = []string{strconv.Itoa(safe.ranks[0]), strconv.Itoa(safe.ranks[1])}
	report(t, "suspend 2 NCCL ranks (sockets)", timed(t, nil, cryo, append([]string{"cuda", "suspend"}, ranks...)...))
	report(t, "resume 2 NCCL ranks (sockets)", timed(t, nil, cryo, append([]string{"cuda", "resume"}, ranks...)...))
	safe.waitOK(5)
}

// TestGPUNCCLSocketsCheckpoint: the same 2-rank job with NCCL on sockets,
// one process per GPU, is checkpointed as one process tree with its TCP
// connections (CRIU 4.2, --tcp-established) and restored: both ranks go on
// computing correct all-reduces. libuv's io_uring (PyTorch's TCPStore) is
// turned off: CRIU cannot dump io_uring.
func TestGPUNCCLSocketsCheckpoint(t *testing.T) {
	gpuUUIDs(t, 2)
	py := torchPython(t)
	reapOrphans(t)
	cryo := cryoBin(t, "cryo")
	j := startNCCLJob(t, py, "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_CUMEM_ENABLE=0", "UV_USE_IO_URING=0", "USE_LIBUV=0")
	img := filepath.Join(t.TempDir(), "img")
	start := time.Now()
	out, err := runErr(5*time.Minute, nil, cryo, "checkpoint", "--pid", strconv.Itoa(j.launcher), "--dir", img, "--tcp-established")
	if err != nil && strings.Contains(out, "io_uring") {
		// cryo refuses before any suspend: the job must go on untouched.
		j.waitOK(5)
		t.Skipf("the job holds an io_uring instance, which CRIU cannot checkpoint; refused before any suspend, the job went on:\n%s", tail(out, 3))
	}
	if err != nil {
		t.Fatalf("checkpoint of the NCCL job: %v\n%s", err, out)
	}
	report(t, "checkpoint of a 2-rank NCCL job (sockets)", time.Since(start))
	// The restore needs the very pids back: the ranks, orphaned by the
	// dump, are this test's (the subreaper's) to reap.
	waitFor(t, 30*time.Second, "the job's pids to be free", func() bool {
		for _, p := range j.ranks {
			unix.Wait4(p, nil, unix.WNOHANG, nil)
		}
		for _, p := range append(j.ranks, j.launcher) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err == nil {
				return false
			}
		}
		return true
	})
	before := j.oks()
	report(t, "restore of the NCCL job", timed(t, nil, cryo, "restore", "--dir", img, "--tcp-established"))
	j.waitOK(5)
	t.Logf("all-reduces per rank before the checkpoint %v, now %v", before, j.oks())
	os.RemoveAll(img)
}
