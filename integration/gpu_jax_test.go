package integration

// A JAX process through `cryo cuda suspend` and `cryo cuda resume`, in
// place, on a real GPU: with its threads running after the driver's
// checkpoint, two of JAX's ~175 threads fault in libcuda and the process
// dies. cryo holds every thread stopped but the driver's restore thread
// from the checkpoint until the restore, so the process lives and its
// results are the same after the resume. Runs with JAX's defaults (every
// visible GPU, 75 % preallocated), with one GPU, and with a memory
// fraction.

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/cudacr/proc"
)

func TestGPUJAXSuspendInPlace(t *testing.T) {
	py := torchPython(t)
	if out, err := runErr(2*time.Minute, nil, py.exe, "-c", "import jax; print(jax.devices())"); err != nil || !strings.Contains(out, "Cuda") && !strings.Contains(out, "cuda") {
		t.Skipf("no JAX with CUDA here: %v %s", err, tail(out, 2))
	}
	script := filepath.Join(workloadsDir(t), "jax_ticks.py")
	for _, c := range []struct{ name, env string }{
		{"Defaults", ""},
		{"OneGPU", "CUDA_VISIBLE_DEVICES=0"},
		{"MemFraction", "XLA_PYTHON_CLIENT_MEM_FRACTION=.30"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "jax.log")
			args := []string{script, "200", "256"}
			cmd := startDetachedEnv(t, logPath, c.env, py.exe, args...)
			pid := cmd.Process.Pid
			defer killPid(pid)
			waitTicks(t, func() string { return readFile(logPath) }, 2, "JAX's first ticks")
			threads := len(taskDirs(pid))
			cryo, spid := cryoBin(t, "cryo"), strconv.Itoa(pid)
			report(t, "JAX "+c.name+": suspend", timed(t, nil, cryo, "cuda", "suspend", spid))
			time.Sleep(3 * time.Second)
			if !proc.Alive(pid) {
				t.Fatalf("JAX died while suspended (%d threads):\n%s", threads, tail(readFile(logPath), 20))
			}
			state := run(t, time.Minute, nil, cryo, "cuda", "state", spid)
			held := lastTick(t, readFile(logPath))
			report(t, "JAX "+c.name+": resume", timed(t, nil, cryo, "cuda", "resume", spid))
			waitTicks(t, func() string { return readFile(logPath) }, held+3, "JAX's ticks after resume")
			if strings.Contains(readFile(logPath), "sum=BAD") {
				t.Fatalf("JAX's results changed across the suspend:\n%s", tail(readFile(logPath), 10))
			}
			t.Logf("JAX %s: %d threads, state while suspended %q, ticks on from %d", c.name, threads, strings.TrimSpace(state), held)
		})
	}
}

// startDetachedEnv is startDetached with one extra environment variable.
func startDetachedEnv(t *testing.T, logPath, env, name string, args ...string) *exec.Cmd {
	t.Helper()
	if env == "" {
		return startDetached(t, logPath, name, args...)
	}
	t.Setenv(strings.SplitN(env, "=", 2)[0], strings.SplitN(env, "=", 2)[1])
	return startDetached(t, logPath, name, args...)
}

func taskDirs(pid int) []string {
	m, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*")
	return m
}
