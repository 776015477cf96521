package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The GPU tests run where an NVIDIA GPU exists (`make gpu-test`, from the
// bundle of `make dist`) and skip with one line elsewhere. They drive the
// CUDA workload contrib/workloads/cudamem, which verifies its device memory
// and a GPU-side counter on every tick.

// gpuOrSkip skips the test on a machine without an NVIDIA GPU.
func gpuOrSkip(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		t.Skip("no NVIDIA GPU here (/dev/nvidiactl absent): GPU tests run with `make gpu-test` on a GPU host")
	}
}

// cudamemBin is the built CUDA workload: $CRYO_CUDAMEM or <bin>/cudamem.
func cudamemBin(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CRYO_CUDAMEM")
	if p == "" {
		p = filepath.Join(binDir(), "cudamem")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("CUDA workload %s missing (%v): `make gpu-test` builds it with nvcc", p, err)
	}
	return p
}

// gpuMiB is the device memory the workload fills: $CRYO_GPU_MIB, default 1024.
func gpuMiB() string {
	if v := os.Getenv("CRYO_GPU_MIB"); v != "" {
		return v
	}
	return "1024"
}

// report appends a measured figure to $CRYO_GPU_REPORT (if set) and the test log.
func report(t *testing.T, figure string, d time.Duration) {
	t.Helper()
	t.Logf("FIGURE %s: %.3f s", figure, d.Seconds())
	path := os.Getenv("CRYO_GPU_REPORT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Logf("report: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%s\t%.3f\n", t.Name(), figure, d.Seconds())
}

// timed runs a command and returns its duration, failing the test on error.
func timed(t *testing.T, env []string, name string, args ...string) time.Duration {
	t.Helper()
	start := time.Now()
	out := run(t, 8*time.Minute, env, name, args...)
	d := time.Since(start)
	t.Logf("%s %s (%.2fs)\n%s", filepath.Base(name), strings.Join(args, " "), d.Seconds(), out)
	return d
}

var tickRe = regexp.MustCompile(`(?m)^tick (\d+) counter=(\d+) verify=(OK|BAD)`)

// lastTick returns the last tick number in out and fails on any verify=BAD.
func lastTick(t *testing.T, out string) int {
	t.Helper()
	if strings.Contains(out, "verify=BAD") || strings.Contains(out, "cuda error") {
		t.Fatalf("workload reports broken GPU state:\n%s", tail(out, 20))
	}
	m := tickRe.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// waitTicks waits until the output read by get has a tick beyond after.
func waitTicks(t *testing.T, get func() string, after int, what string) int {
	t.Helper()
	var n int
	waitFor(t, 90*time.Second, what, func() bool {
		n = lastTick(t, get())
		return n > after
	})
	return n
}

// readFile returns a file's content, or "" if it cannot be read yet.
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startDetached starts a process in its own session with stdin from
// /dev/null and stdout/stderr appended to logPath, as a daemon would be: CRIU
// can then dump it without a shell job.
func startDetached(t *testing.T, logPath string, name string, args ...string) *exec.Cmd {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait() // reap it when it exits or is checkpointed away
	return cmd
}

// killPid kills a process and ignores a missing one.
func killPid(pid int) {
	if pid <= 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	// Until the process is gone and the driver has let go of its GPU
	// memory: the next test's baseline of GPU memory in use must not count
	// it (a JAX process takes a second or two to be torn down).
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if !pidLives(pid) && !gpuComputeApp(pid) {
			return
		}
	}
}

// pidLives: pid exists and is not a zombie.
func pidLives(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || len(s) <= i+2 || s[i+2] != 'Z'
}

// gpuComputeApp: nvidia-smi lists pid among the GPUs' compute processes.
func gpuComputeApp(pid int) bool {
	out, err := exec.Command("nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader").Output()
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(out)) {
		if f == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// gpuMemoryUsedMiB sums the GPU memory in use, through nvidia-smi.
func gpuMemoryUsedMiB(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Logf("nvidia-smi: %v", err)
		return -1
	}
	total := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		v, _ := strconv.Atoi(strings.TrimSpace(sc.Text()))
		total += v
	}
	return total
}
