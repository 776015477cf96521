package gpu

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/opencontainers/runtime-spec/specs-go"
)

type framework struct {
	name string   // fw.py's FRAMEWORK and the subtest's name
	env  []string // the process's extra environment
	mib  string   // GPU memory held besides the framework's own
}

// frameworks: JAX with a memory fraction and seeing every GPU (its default
// preallocation, 75 % of each GPU, is the in-place case of
// TestGPUJAXDefaults), and the others as users run them.
var frameworks = []framework{
	{"jax", []string{"XLA_PYTHON_CLIENT_MEM_FRACTION=.05"}, "256"},
	{"torch-expandable", []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}, "512"},
	{"cuda-graph", nil, "256"},
	{"transformers", nil, "256"},
	{"triton", nil, "256"},
	{"cupy-async", nil, "256"},
}

var fwTickRe = regexp.MustCompile(`(?m)^tick (\d+) fw=\S+ sum=(OK|BAD)`)

// fwTicks is the last tick fw.py printed; a sum=BAD fails the test.
func fwTicks(t *testing.T, what, out string) int {
	t.Helper()
	m := fwTickRe.FindAllStringSubmatch(out, -1)
	for _, x := range m {
		if x[2] != "OK" {
			t.Fatalf("%s: the framework's result changed (tick %s):\n%s", what, x[1], harness.Tail(out, 15))
		}
	}
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

func waitFwTicks(t *testing.T, what string, get func() string, after int) int {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if n := fwTicks(t, what, get()); n > after {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no tick past %d within 3m; output:\n%s", what, after, harness.Tail(get(), 25))
		}
	}
}

func fwScript(t *testing.T) string {
	return filepath.Join(workloadsDir(t), "frameworks/fw.py")
}

func TestGPUFrameworks(t *testing.T) {
	py := torchPython(t)
	t.Logf("frameworks: %s", strings.TrimSpace(harness.Run(t, 3*time.Minute, nil, py.exe, "-c",
		"import jax, torch, cupy, transformers, triton; print('jax', jax.__version__, 'torch', torch.__version__, 'cupy', cupy.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)")))
	for _, fw := range frameworks {
		t.Run(fw.name, func(t *testing.T) {
			t.Run("bare", func(t *testing.T) { fwBare(t, py, fw) })
			t.Run("cryo-runc", func(t *testing.T) { fwContainer(t, py, fw, runcFlavor("cryo-runc"), true) })
			t.Run("shim", func(t *testing.T) { fwContainer(t, py, fw, gpuFlavors()[1], false) })
		})
	}
}

// fwBare: in place, then a checkpoint and restore, of one bare process.
// JAX on a host with several GPUs opens them all: with XLA's default
// allocator and with the platform allocator it is refused (driver 580
// does not restore it reliably); with CUDA_VISIBLE_DEVICES=0 it is
// suspended and resumed in place, and its checkpoint is refused (the
// driver failed every restore of it, also after that in-place cycle, when
// the process held GPU 0's device files alone). JAX's checkpoint and restore are
// the containers' part there (fwContainer: one GPU device each).
func fwBare(t *testing.T, py *hostPython, fw framework) {
	jaxOneOfSeveral := false
	if fw.name == "jax" && len(gpuUUIDsOrNone(t)) >= 2 {
		fwRefused(t, py, fw, "XLA's default allocator")
		platform := fw
		platform.env = append(append([]string{}, fw.env...), "XLA_PYTHON_CLIENT_ALLOCATOR=platform")
		fwRefused(t, py, platform, "allocator platform")
		fw.env = append(append([]string{}, fw.env...), "CUDA_VISIBLE_DEVICES=0")
		jaxOneOfSeveral = true
	}
	logPath := filepath.Join(t.TempDir(), fw.name+".log")
	setEnv(t, fw.env)
	cmd := startDetached(t, logPath, py.exe, fwScript(t), fw.name, "100", fw.mib)
	pid, spid := cmd.Process.Pid, strconv.Itoa(cmd.Process.Pid)
	defer killPid(pid)
	get := func() string { return harness.ReadFile(logPath) }
	waitFwTicks(t, fw.name+": first ticks", get, 1)
	threads := len(taskDirs(pid))
	cryo := harness.CryoBin(t, "cryo")

	report(t, fw.name+": cuda suspend", harness.Timed(t, nil, cryo, "cuda", "suspend", spid))
	// Ticks go on until the driver's lock; none may come once suspended.
	n := fwTicks(t, fw.name, get())
	time.Sleep(2 * time.Second)
	if !procfs.Alive(pid) {
		t.Fatalf("%s died while suspended (%d threads):\n%s", fw.name, threads, harness.Tail(get(), 20))
	}
	if st := harness.Run(t, time.Minute, nil, cryo, "cuda", "state", "--json", spid); !strings.Contains(st, `"checkpointed"`) || !strings.Contains(st, `"stopped": true`) {
		t.Fatalf("%s while suspended: cryo cuda state says %s", fw.name, st)
	}
	if now := fwTicks(t, fw.name, get()); now > n+1 {
		t.Fatalf("%s ticked while suspended (%d → %d)", fw.name, n, now)
	}
	report(t, fw.name+": cuda resume", harness.Timed(t, nil, cryo, "cuda", "resume", spid))
	n = waitFwTicks(t, fw.name+": ticks after the resume", get, fwTicks(t, fw.name, get())+2)

	img := filepath.Join(t.TempDir(), "img")
	if jaxOneOfSeveral {
		out, err := harness.RunErr(time.Minute, nil, cryo, "checkpoint", "--pid", spid, "--dir", img)
		if err == nil || !strings.Contains(out, "(2 GPUs, ") || !strings.Contains(out, ", CUDA_VISIBLE_DEVICES=0)") || !strings.Contains(out, "container given only its GPU") {
			t.Fatalf("cryo checkpoint of JAX with CUDA_VISIBLE_DEVICES=0 on several GPUs: err %v, output:\n%s", err, out)
		}
		t.Logf("cryo checkpoint refused: %s", strings.TrimSpace(harness.Tail(out, 1)))
		waitFwTicks(t, fw.name+": ticks after the refused checkpoint", get, n+2)
		return
	}
	report(t, fw.name+": checkpoint", harness.Timed(t, nil, cryo, "checkpoint", "--pid", spid, "--dir", img))
	start := time.Now()
	report(t, fw.name+": restore", harness.Timed(t, nil, cryo, "restore", "--dir", img))
	waitFwTicks(t, fw.name+": ticks after the restore", get, n)
	report(t, fw.name+": restore to next tick", time.Since(start))
	_ = os.RemoveAll(img)
	t.Logf("%s: %d threads; in place, checkpoint and restore: results unchanged", fw.name, threads)
}

// fwRefused: a JAX process on several GPUs, with the allocator its
// environment picks (named in the refusal as alloc), is refused by `cryo
// cuda suspend` and `cryo checkpoint`, before anything is suspended, and
// goes on computing correctly.
func fwRefused(t *testing.T, py *hostPython, fw framework, alloc string) {
	logPath := filepath.Join(t.TempDir(), fw.name+"-refused.log")
	setEnv(t, fw.env)
	cmd := startDetached(t, logPath, py.exe, fwScript(t), fw.name, "100", fw.mib)
	pid, spid := cmd.Process.Pid, strconv.Itoa(cmd.Process.Pid)
	defer killPid(pid)
	get := func() string { return harness.ReadFile(logPath) }
	n := waitFwTicks(t, fw.name+" ("+alloc+"): first ticks", get, 1)
	cryo := harness.CryoBin(t, "cryo")
	for _, args := range [][]string{{"cuda", "suspend", spid}, {"checkpoint", "--pid", spid, "--dir", filepath.Join(t.TempDir(), "img")}} {
		out, err := harness.RunErr(time.Minute, nil, cryo, args...)
		if err == nil || !strings.Contains(out, "JAX (XLA) on several GPUs") || !strings.Contains(out, "2 GPUs, "+alloc) || !strings.Contains(out, "container given only its GPU") {
			t.Fatalf("cryo %s of JAX on several GPUs (%s): err %v, output:\n%s", strings.Join(args, " "), alloc, err, out)
		}
		t.Logf("cryo %s refused: %s", args[0], strings.TrimSpace(harness.Tail(out, 1)))
	}
	waitFwTicks(t, fw.name+" ("+alloc+"): ticks after the refusals", get, n+2)
}

// fwContainer: the framework in a container given GPU 0, through one front
// end: the GPU-free pause (cryo-runc), then a checkpoint and a restore onto
// GPU 1 where the host has two.
func fwContainer(t *testing.T, py *hostPython, fw framework, f gpuFlavor, pause bool) {
	id := "cryo-fw-" + strings.ReplaceAll(fw.name, "-", "") + "-" + f.name
	var extra []specs.Mount
	if fw.name == "jax" {
		extra = cudaToolkitMount()
	}
	c := pyContainer(t, harness.CryoBin(t, "cryo-runc"), id, py, map[string]string{"/app/fw.py": fwScript(t)}, extra,
		py.exe, "/app/fw.py", fw.name, "100", fw.mib)
	env := fw.env
	specEnv(t, c.Bundle, env)
	bundleGPUs(t, c.Bundle, 0)
	task := f.start(t, c)
	what := fw.name + " (" + f.name + ")"
	n := waitFwTicks(t, what+": first ticks", task.Output, 1)
	if pause {
		wrap := harness.CryoBin(t, "cryo-runc")
		report(t, what+": pause", harness.Timed(t, nil, wrap, "--root", c.Root, "pause", c.ID))
		time.Sleep(time.Second)
		report(t, what+": resume", harness.Timed(t, nil, wrap, "--root", c.Root, "resume", c.ID))
		n = waitFwTicks(t, what+": ticks after the pause", task.Output, fwTicks(t, what, task.Output())+1)
	}
	report(t, what+": checkpoint", task.Checkpoint())
	to := 0
	if len(gpuUUIDsOrNone(t)) >= 2 {
		to = 1
		moveTo(t, task, c, 1)
	}
	start := time.Now()
	report(t, what+": restore", task.Restore())
	waitFwTicks(t, what+": ticks after the restore", task.Output, n)
	report(t, what+": restore to next tick", time.Since(start))
	if to == 1 {
		if on := harness.GpusOf(t, task.PID()); len(on) != 1 || on[0] != gpuUUIDsOrNone(t)[1] {
			t.Fatalf("%s: after the restore onto GPU 1 the process holds memory on %v", what, on)
		}
	}
	task.signal("KILL")
}

// cudaToolkitMount: XLA compiles its kernels with the CUDA toolkit's
// ptxas, which it looks for in /usr/local/cuda. The container sees the
// host's /usr, but there /usr/local/cuda is a link through
// /etc/alternatives, which it does not see: the toolkit is mounted where
// the link points. Without it JAX fails at its first kernel ("No PTX
// compilation provider is available").
func cudaToolkitMount() []specs.Mount {
	link, err := os.Readlink("/usr/local/cuda")
	dir, err2 := filepath.EvalSymlinks("/usr/local/cuda")
	if err != nil || err2 != nil || !strings.HasPrefix(link, "/etc/") {
		return nil
	}
	return []specs.Mount{roBind(dir, link)}
}

// setEnv sets env (KEY=VALUE) for the test, and the processes it starts.
func setEnv(t *testing.T, env []string) {
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		t.Setenv(k, v)
	}
}

// specEnv adds env to a bundle's process environment.
func specEnv(t *testing.T, bundle string, env []string) {
	t.Helper()
	if len(env) == 0 {
		return
	}
	s := readSpec(t, bundle)
	s.Process.Env = append(s.Process.Env, env...)
	harness.WriteSpec(t, bundle, s)
}

// gpuUUIDsOrNone lists the host's GPUs, none where nvidia-smi fails.
func gpuUUIDsOrNone(t *testing.T) []string {
	out, err := harness.RunErr(30*time.Second, nil, "nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader")
	if err != nil {
		return nil
	}
	return strings.Fields(out)
}

// TestGPUJAXDefaults: JAX as it starts by default (75 % of the GPU
// preallocated, ~175 threads), on GPU 0, suspended and resumed in place.
func TestGPUJAXDefaults(t *testing.T) {
	py := torchPython(t)
	t.Setenv("CUDA_VISIBLE_DEVICES", "0")
	logPath := filepath.Join(t.TempDir(), "jax.log")
	cmd := startDetached(t, logPath, py.exe, fwScript(t), "jax", "100", "256")
	pid, spid := cmd.Process.Pid, strconv.Itoa(cmd.Process.Pid)
	defer killPid(pid)
	get := func() string { return harness.ReadFile(logPath) }
	waitFwTicks(t, "JAX: first ticks", get, 1)
	threads := len(taskDirs(pid))
	cryo := harness.CryoBin(t, "cryo")
	report(t, "JAX defaults: cuda suspend", harness.Timed(t, nil, cryo, "cuda", "suspend", spid))
	time.Sleep(2 * time.Second)
	if !procfs.Alive(pid) {
		t.Fatalf("JAX died while suspended (%d threads):\n%s", threads, harness.Tail(get(), 20))
	}
	report(t, "JAX defaults: cuda resume", harness.Timed(t, nil, cryo, "cuda", "resume", spid))
	waitFwTicks(t, "JAX: ticks after the resume", get, fwTicks(t, "JAX", get())+2)
	t.Logf("JAX defaults: %d threads, GPUs seen: %s", threads, strings.TrimSpace(strings.SplitN(get(), "\n", 2)[0]))
}

func taskDirs(pid int) []string {
	m, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*")
	return m
}
