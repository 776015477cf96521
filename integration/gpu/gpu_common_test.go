package gpu

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
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
		p = filepath.Join(harness.BinDir(), "cudamem")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("CUDA workload %s missing (%v): `make gpu-test` builds it with nvcc", p, err)
	}
	return p
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
