package fakecuda

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ctlSource drives the fake libraries from the command line, as cryo's
// helper does (dlopen, then the driver's entry points):
//
//	ctl LIBCUDA lock|checkpoint|unlock|state PID
//	ctl LIBCUDA restore PID [OLD=NEW,...]
//	ctl LIBNVML nvml
//
// It prints the CUresult (state: "CUresult state"); nvml prints one line
// per GPU: "UUID minor=N free=BYTES procs=PID:BYTES,...".
const ctlSource = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpus.h"

typedef struct { unsigned char old[16], new[16]; } pair;
typedef struct { pair *pairs; unsigned int count; char pad[52 - sizeof(pair *)]; unsigned long long r1; } restore_args;
typedef struct { unsigned int timeoutMs, r0; unsigned long long r1[7]; } lock_args;
typedef struct { unsigned int pid; unsigned long long mem; unsigned int gi, ci; } proc_info;

static void *sym(void *h, const char *name)
{
	void *f = dlsym(h, name);

	if (!f) {
		fprintf(stderr, "ctl: %s\n", dlerror());
		exit(100);
	}
	return f;
}

static unsigned int parse_pairs(char *s, pair *p)
{
	unsigned int n = 0;

	for (char *tok = strtok(s, ","); tok && n < 16; tok = strtok(NULL, ",")) {
		char *eq = strchr(tok, '=');
		if (!eq)
			exit(101);
		*eq = 0;
		if (fakegpu_parse_uuid(tok, p[n].old) || fakegpu_parse_uuid(eq + 1, p[n].new))
			exit(102);
		n++;
	}
	return n;
}

static int nvml(void *h)
{
	int (*init)(void) = sym(h, "nvmlInit_v2");
	int (*count)(unsigned int *) = sym(h, "nvmlDeviceGetCount_v2");
	int (*handle)(unsigned int, void **) = sym(h, "nvmlDeviceGetHandleByIndex_v2");
	int (*uuid)(void *, char *, unsigned int) = sym(h, "nvmlDeviceGetUUID");
	int (*minor)(void *, unsigned int *) = sym(h, "nvmlDeviceGetMinorNumber");
	int (*mem)(void *, unsigned long long *) = sym(h, "nvmlDeviceGetMemoryInfo");
	int (*procs)(void *, unsigned int *, proc_info *) = sym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
	unsigned int n = 0;

	if (init() || count(&n))
		return 1;
	for (unsigned int i = 0; i < n; i++) {
		void *d;
		char u[96];
		unsigned int m = 0, k = 0;
		unsigned long long mi[3];
		proc_info pi[64];
		int r;

		handle(i, &d);
		uuid(d, u, sizeof(u));
		minor(d, &m);
		mem(d, mi);
		r = procs(d, &k, NULL); /* 0: none; 7 (INSUFFICIENT_SIZE): k needed */
		if (r == 7 && k <= 64)
			r = procs(d, &k, pi);
		printf("%s minor=%u free=%llu procs=", u, m, mi[1]);
		for (unsigned int j = 0; r == 0 && j < k; j++)
			printf("%s%u:%llu", j ? "," : "", pi[j].pid, pi[j].mem);
		printf("\n");
	}
	return 0;
}

int main(int argc, char **argv)
{
	void *h;
	int pid, r = -1;

	if (argc < 3 || !(h = dlopen(argv[1], RTLD_NOW)))
		return 100;
	if (!strcmp(argv[2], "nvml"))
		return nvml(h);
	if (argc < 4)
		return 100;
	pid = atoi(argv[3]);
	if (!strcmp(argv[2], "lock")) {
		lock_args a = {5000, 0, {0}};
		r = ((int (*)(int, lock_args *))sym(h, "cuCheckpointProcessLock"))(pid, &a);
	} else if (!strcmp(argv[2], "checkpoint")) {
		r = ((int (*)(int, void *))sym(h, "cuCheckpointProcessCheckpoint"))(pid, NULL);
	} else if (!strcmp(argv[2], "unlock")) {
		r = ((int (*)(int, void *))sym(h, "cuCheckpointProcessUnlock"))(pid, NULL);
	} else if (!strcmp(argv[2], "restore")) {
		pair p[16];
		restore_args a;

		memset(&a, 0, sizeof(a));
		if (argc > 4) {
			a.count = parse_pairs(argv[4], p);
			a.pairs = p;
		}
		r = ((int (*)(int, restore_args *))sym(h, "cuCheckpointProcessRestore"))(pid, &a);
	} else if (!strcmp(argv[2], "state")) {
		int st = -1;

		r = ((int (*)(int, int *))sym(h, "cuCheckpointProcessGetState"))(pid, &st);
		printf("%d %d\n", r, st);
		return 0;
	} else {
		return 100;
	}
	printf("%d\n", r);
	return 0;
}
`

// rig is a built fake driver plus the ctl program.
type rig struct {
	Paths
	ctl string
}

// host is a fake GPU host (see NewHost).
type host struct{ Host }

func newHost(n int, prefix string) host { return host{NewHost(n, prefix)} }

func (h host) env() []string { return []string{"CRYO_FAKE_GPUS=" + h.GPUs} }

// Default free memory of a table GPU: 99% of 85520809984.
const defaultFree = 85520809984 - 85520809984/100

func newRig(t *testing.T) *rig {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the fake driver reads and writes other processes' memory")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("needs gcc")
	}
	dir := t.TempDir()
	p, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{Paths: p, ctl: filepath.Join(dir, "ctl")}
	src := filepath.Join(dir, "ctl.c")
	if err := os.WriteFile(src, []byte(ctlSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-I", filepath.Join(dir, "src"), "-o", r.ctl, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc ctl: %v\n%s", err, out)
	}
	return r
}

// call runs a driver entry point on pid with the caller's environment env
// (the restoring host's GPUs) and returns the CUresult.
func (r *rig) call(t *testing.T, env []string, op string, pid int, args ...string) int {
	t.Helper()
	out := r.run(t, env, append([]string{r.LibCUDA, op, strconv.Itoa(pid)}, args...)...)
	n, err := strconv.Atoi(strings.Fields(out)[0])
	if err != nil {
		t.Fatalf("ctl %s: %q", op, out)
	}
	return n
}

func (r *rig) state(t *testing.T, pid int) int {
	t.Helper()
	f := strings.Fields(r.run(t, nil, r.LibCUDA, "state", strconv.Itoa(pid)))
	if len(f) != 2 || f[0] != "0" {
		t.Fatalf("state of %d: %v", pid, f)
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// nvml returns the fake NVML's lines, by UUID.
func (r *rig) nvml(t *testing.T, env []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.run(t, env, r.LibNVML, "nvml")), "\n") {
		uuid, rest, _ := strings.Cut(l, " ")
		m[uuid] = rest
	}
	return m
}

func (r *rig) run(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.ctl, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil || len(strings.Fields(string(out))) == 0 {
		t.Fatalf("ctl %v: %v %q", args, err, out)
	}
	return string(out)
}

// app is a running fakecuda-app.
type app struct {
	pid       int
	mu        sync.Mutex
	out, errb bytes.Buffer
	done      chan struct{}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (a *app) stdout() string { a.mu.Lock(); defer a.mu.Unlock(); return a.out.String() }
func (a *app) stderr() string { a.mu.Lock(); defer a.mu.Unlock(); return a.errb.String() }

var tickRE = regexp.MustCompile(`tick (\d+) state=running sum=(\w+)\n`)

func (a *app) lastTick(t *testing.T) int {
	t.Helper()
	m := tickRE.FindAllStringSubmatch(a.stdout(), -1)
	if len(m) == 0 {
		return 0
	}
	if slices.ContainsFunc(m, func(s []string) bool { return s[2] != "OK" }) {
		t.Fatalf("pid %d lost its device memory:\n%s", a.pid, a.stdout())
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// waitTicks waits until the app has ticked n more times.
func (a *app) waitTicks(t *testing.T, n int) {
	t.Helper()
	want := a.lastTick(t) + n
	waitFor(t, "pid "+strconv.Itoa(a.pid)+" to tick", func() bool {
		select {
		case <-a.done:
			t.Fatalf("pid %d exited:\n%s%s", a.pid, a.stdout(), a.stderr())
		default:
		}
		return a.lastTick(t) >= want
	})
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// start starts fakecuda-app (20 ms ticks, 64 KiB of "device memory") with
// env; argv, when given, is a command that execs the app given as its
// arguments (the pid stays the app's). It waits for the app's first tick.
// These tests call the driver's transitions one by one, with no thread
// held, so the app's touch thread is off unless env turns it on.
func (r *rig) start(t *testing.T, env []string, argv ...string) *app {
	t.Helper()
	args := append(argv, r.App, "20", "64")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+r.Dir, "CRYO_FAKE_TOUCH=0"), env...)
	a := &app{done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = lockedWriter{&a.mu, &a.out}, lockedWriter{&a.mu, &a.errb}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.pid = cmd.Process.Pid
	go func() { cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-a.done:
		case <-time.After(10 * time.Second):
		}
	})
	a.waitTicks(t, 1)
	return a
}

func readPage(t *testing.T, pid int) Page {
	t.Helper()
	p, err := ReadPage(pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// gpus formats a page's GPUs as "uuid/minor/memory" for comparisons.
func gpus(p Page) string {
	var s []string
	for _, g := range p.GPUs {
		s = append(s, fmt.Sprintf("%s/%d/%d", g.UUID, g.Minor, g.Memory))
	}
	return strings.Join(s, " ")
}

func gpu(uuid string, minor int, memory uint64) string {
	return fmt.Sprintf("%s/%d/%d", uuid, minor, memory)
}

// heldNodes are the /dev/nvidia* paths pid holds open, sorted.
func heldNodes(pid int) []string {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	var held []string
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "/dev/nvidia") {
			held = append(held, l)
		}
	}
	slices.Sort(held)
	return held
}

func hostHasNodes() bool {
	m, _ := filepath.Glob("/dev/nvidia[0-9]*")
	return len(m) > 0
}

const (
	cuSuccess      = 0
	cuInvalidValue = 1
	cuOS           = 304
	cuNotSupported = 801
)

func TestFakeDriver(t *testing.T) {
	r := newRig(t)
	t.Run("VisibleDevices", func(t *testing.T) { testVisible(t, r) })
	t.Run("RestoreMap", func(t *testing.T) { testRestoreMap(t, r) })
	t.Run("NCCL", func(t *testing.T) { testNCCL(t, r) })
	t.Run("DeviceNodes", func(t *testing.T) { testNodes(t, r) })
}

// A process of a 2-GPU host started with CUDA_VISIBLE_DEVICES=1 sees and
// uses the second GPU only; NVML lists it there and only there.
func testVisible(t *testing.T, r *rig) {
	h := newHost(2, "fc100000")
	a := r.start(t, append(h.env(), "CUDA_VISIBLE_DEVICES=1"))
	p := readPage(t, a.pid)
	if p.Layout != 3 || gpus(p) != gpu(h.UUIDs[1], 1, 64<<10) || p.DevSize != 64<<10 || p.RestoreTID == 0 || p.RestoreTID == a.pid {
		t.Fatalf("page: %+v", p)
	}
	if !hostHasNodes() && (p.HoldsDevices || p.IPC) {
		t.Fatalf("no device node on this host, yet flags say otherwise: %+v", p)
	}
	if !strings.Contains(a.stderr(), "gpus="+h.UUIDs[1]+"\n") {
		t.Fatalf("start-up line: %q", a.stderr())
	}
	n := r.nvml(t, h.env())
	if want := fmt.Sprintf("minor=1 free=%d procs=%d:%d", defaultFree-64<<10, a.pid, 64<<10); n[h.UUIDs[1]] != want {
		t.Fatalf("NVML on GPU 1: %q, want %q", n[h.UUIDs[1]], want)
	}
	if want := fmt.Sprintf("minor=0 free=%d procs=", defaultFree); n[h.UUIDs[0]] != want {
		t.Fatalf("NVML on GPU 0: %q, want %q", n[h.UUIDs[0]], want)
	}

	// No visible GPU: CUDA_VISIBLE_DEVICES set but empty, or naming none.
	for _, v := range []string{"", "7", "GPU-ffff"} {
		cmd := exec.Command(r.App, "20", "64", "1")
		cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+r.Dir, "CUDA_VISIBLE_DEVICES="+v), h.env()...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "no CUDA-capable device is detected") {
			t.Fatalf("CUDA_VISIBLE_DEVICES=%q: %v %s", v, err, out)
		}
	}
}

// A process that sees both GPUs takes only a one-to-one map over both.
func testRestoreMap(t *testing.T, r *rig) {
	h := newHost(2, "fc200000")
	u0, u1 := h.UUIDs[0], h.UUIDs[1]
	a := r.start(t, append(h.env(), "FAKECUDA_SPREAD=1"))
	both := gpu(u0, 0, 32<<10) + " " + gpu(u1, 1, 32<<10)
	if p := readPage(t, a.pid); gpus(p) != both {
		t.Fatalf("spread: %s", gpus(p))
	}
	if c := r.call(t, h.env(), "lock", a.pid); c != cuSuccess {
		t.Fatalf("lock: %d", c)
	}
	if c := r.call(t, h.env(), "checkpoint", a.pid); c != cuSuccess || r.state(t, a.pid) != 2 {
		t.Fatalf("checkpoint: %d", c)
	}
	if n := r.nvml(t, h.env()); !strings.HasSuffix(n[u0], "procs=") || !strings.HasSuffix(n[u1], "procs=") {
		t.Fatalf("a checkpointed process holds no GPU memory: %v", n)
	}
	unknown := "GPU-ffffffff-0000-4000-8000-000000000009"
	for _, bad := range []string{
		u0 + "=" + u1,                            // one pair for two GPUs
		u0 + "=" + u1 + "," + u1 + "=" + u1,      // new UUIDs not distinct
		u0 + "=" + u1 + "," + u0 + "=" + u0,      // an old UUID twice
		u0 + "=" + u1 + "," + unknown + "=" + u0, // an old UUID the process does not see
		u0 + "=" + u1 + "," + u1 + "=" + unknown, // a new UUID the host lacks
	} {
		if c := r.call(t, h.env(), "restore", a.pid, bad); c != cuInvalidValue {
			t.Fatalf("restore %s: %d, want %d", bad, c, cuInvalidValue)
		}
		if p := readPage(t, a.pid); p.State != 2 || gpus(p) != both || p.Restores != 0 {
			t.Fatalf("a refused restore changed the process: %+v", p)
		}
	}
	// Without pairs, the GPUs must be on the restoring host.
	if c := r.call(t, newHost(2, "fc2fffff").env(), "restore", a.pid); c != cuInvalidValue {
		t.Fatalf("restore onto a host without its GPUs: %d", c)
	}
	if c := r.call(t, h.env(), "restore", a.pid, u0+"="+u1+","+u1+"="+u0); c != cuSuccess {
		t.Fatalf("swap: %d", c)
	}
	p := readPage(t, a.pid)
	if p.State != 1 || p.PairsCount != 2 || p.Restores != 1 || gpus(p) != gpu(u1, 1, 32<<10)+" "+gpu(u0, 0, 32<<10) {
		t.Fatalf("after the swap: state %d pairs %d %s", p.State, p.PairsCount, gpus(p))
	}
	if c := r.call(t, h.env(), "unlock", a.pid); c != cuSuccess {
		t.Fatalf("unlock: %d", c)
	}
	a.waitTicks(t, 3)
}

// An NCCL rank on CUDA IPC checkpoints but is lost at restore (801, failed);
// with the environment that keeps NCCL on sockets it restores.
func testNCCL(t *testing.T, r *rig) {
	h := newHost(2, "fc300000")
	a := r.start(t, append(h.env(), "FAKECUDA_NCCL=1"))
	var names []string
	comms, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/comm", a.pid))
	for _, c := range comms {
		b, _ := os.ReadFile(c)
		names = append(names, strings.TrimSuffix(string(b), "\n"))
	}
	if !slices.Contains(names, "pt_nccl_watchdg") || !slices.Contains(names, "pt_nccl_heartbt") {
		t.Fatalf("threads %q", names)
	}
	if maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", a.pid)); !bytes.Contains(maps, []byte("libnccl.so")) {
		t.Fatal("an NCCL rank maps libnccl")
	}
	if !readPage(t, a.pid).IPC {
		t.Fatal("an NCCL rank with default settings must use CUDA IPC")
	}
	r.call(t, h.env(), "lock", a.pid)
	if c := r.call(t, h.env(), "checkpoint", a.pid); c != cuSuccess {
		t.Fatalf("checkpoint: %d", c)
	}
	if c := r.call(t, h.env(), "restore", a.pid); c != cuNotSupported || r.state(t, a.pid) != 3 {
		t.Fatalf("restore: %d, state %d; want %d, failed", c, r.state(t, a.pid), cuNotSupported)
	}

	safe := r.start(t, append(h.env(), "FAKECUDA_NCCL=1", "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_CUMEM_ENABLE=0"))
	if readPage(t, safe.pid).IPC {
		t.Fatal("an NCCL rank on sockets uses no CUDA IPC")
	}
	for _, op := range []string{"lock", "checkpoint", "restore", "unlock"} {
		if c := r.call(t, h.env(), op, safe.pid); c != cuSuccess {
			t.Fatalf("%s: %d", op, c)
		}
	}
	safe.waitTicks(t, 3)
}

// In a mount namespace whose /dev has nvidia1 only (a container given GPU
// 1), the app holds /dev/nvidia1, lets go of it at checkpoint, fails a
// restore onto GPU 0 while /dev/nvidia0 is missing, and holds /dev/nvidia0
// once restored onto GPU 0 with the node there.
func testNodes(t *testing.T, r *rig) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare")
	}
	h := newHost(2, "fc400000")
	u0, u1 := h.UUIDs[0], h.UUIDs[1]
	script := "mount -t tmpfs tmpfs /dev && mknod /dev/null c 1 3 && mknod /dev/nvidia1 c 1 3 && mknod /dev/nvidia9 c 1 3 && exec \"$@\""
	a := r.start(t, h.env(), "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh")
	p := readPage(t, a.pid)
	if !p.HoldsDevices || gpus(p) != gpu(u1, 1, 64<<10) {
		t.Fatalf("page: %+v", p)
	}
	if held := heldNodes(a.pid); !slices.Equal(held, []string{"/dev/nvidia1"}) {
		t.Fatalf("holds %v, want /dev/nvidia1", held)
	}
	r.call(t, h.env(), "lock", a.pid)
	if c := r.call(t, h.env(), "checkpoint", a.pid); c != cuSuccess {
		t.Fatalf("checkpoint: %d", c)
	}
	if held := heldNodes(a.pid); len(held) != 0 {
		t.Fatalf("checkpointed, yet holds %v", held)
	}
	if c := r.call(t, h.env(), "restore", a.pid, u1+"="+u0); c != cuOS {
		t.Fatalf("restore onto a GPU without its node: %d, want %d", c, cuOS)
	}
	if p := readPage(t, a.pid); p.State != 2 || gpus(p) != gpu(u1, 1, 64<<10) || len(heldNodes(a.pid)) != 0 {
		t.Fatalf("a failed restore must leave the process checkpointed on its GPU: %+v %v", p, heldNodes(a.pid))
	}
	if out, err := exec.Command("mknod", fmt.Sprintf("/proc/%d/root/dev/nvidia0", a.pid), "c", "1", "3").CombinedOutput(); err != nil {
		t.Fatalf("mknod: %v %s", err, out)
	}
	if c := r.call(t, h.env(), "restore", a.pid, u1+"="+u0); c != cuSuccess {
		t.Fatalf("restore: %d", c)
	}
	if held := heldNodes(a.pid); !slices.Equal(held, []string{"/dev/nvidia0"}) {
		t.Fatalf("restored onto GPU 0, holds %v", held)
	}
	if p := readPage(t, a.pid); gpus(p) != gpu(u0, 0, 64<<10) {
		t.Fatalf("restored onto %s", gpus(p))
	}
	r.call(t, h.env(), "unlock", a.pid)
	a.waitTicks(t, 3)
	if n := r.nvml(t, h.env()); !strings.HasSuffix(n[u0], fmt.Sprintf("procs=%d:%d", a.pid, 64<<10)) {
		t.Fatalf("NVML: %v", n)
	}
}
