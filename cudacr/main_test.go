package cudacr

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/cudacr/fakecuda"
)

// The tests drive the fake driver through the real path: dlopen in a
// helper process re-executed from this test binary.

var (
	fakes     fakecuda.Paths
	faultsDir string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cudacr-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if fakes, err = fakecuda.Build(filepath.Join(dir, "fake")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	faultsDir = filepath.Join(dir, "faults")
	if err := os.Mkdir(faultsDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Helpers inherit the environment, and so the fault directory.
	os.Setenv("CRYO_FAKE_CUDA_FAULTS", faultsDir)
	// A race-enabled helper would otherwise sleep 1s at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	return m.Run()
}

// newDriver returns a Driver on the fake library with short deadlines.
func newDriver() *Driver {
	return New(Options{LibPath: fakes.LibCUDA, NVMLPath: fakes.LibNVML, CallTimeout: 5 * time.Second, CopyTimeout: 10 * time.Second})
}

// fault arms a fault file for op on pid; removed at the end of the test.
func fault(t *testing.T, op string, pid int, text string) {
	t.Helper()
	path := filepath.Join(faultsDir, fmt.Sprintf("%s.%d", op, pid))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
}

// app is a running fakecuda-app.
type app struct {
	pid  int
	cmd  *exec.Cmd
	tick atomic.Int64
	bad  atomic.Bool
	done chan struct{}
}

// startApp starts fakecuda-app and waits for its first tick, so that its
// CUDA state exists.
func startApp(t *testing.T) *app {
	t.Helper()
	cmd := exec.Command(fakes.App, "10", "256")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+fakes.Dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &app{pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go a.read(out)
	t.Cleanup(func() { cmd.Process.Kill(); <-a.done; cmd.Wait() })
	a.waitTicks(t, 1)
	return a
}

func (a *app) read(out interface{ Read([]byte) (int, error) }) {
	defer close(a.done)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var n int64
		var state, sum string
		fmt.Sscanf(sc.Text(), "tick %d state=%s sum=%s", &n, &state, &sum)
		if sum != "OK" {
			a.bad.Store(true)
		}
		a.tick.Store(n)
	}
}

// waitTicks waits until the app has ticked n more times.
func (a *app) waitTicks(t *testing.T, n int64) {
	t.Helper()
	want := a.tick.Load() + n
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if a.bad.Load() {
			t.Fatalf("pid %d: device memory pattern broken (sum=BAD)", a.pid)
		}
		if a.tick.Load() >= want {
			return
		}
	}
	t.Fatalf("pid %d: stuck at tick %d, want %d", a.pid, a.tick.Load(), want)
}

// assertStalled checks that the app does not tick for a while.
func (a *app) assertStalled(t *testing.T) {
	t.Helper()
	before := a.tick.Load()
	time.Sleep(80 * time.Millisecond)
	if now := a.tick.Load(); now != before {
		t.Fatalf("pid %d ticked %d→%d while suspended", a.pid, before, now)
	}
}

func page(t *testing.T, pid int) fakecuda.Page {
	t.Helper()
	p, err := fakecuda.ReadPage(pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantState(t *testing.T, d *Driver, pid int, want State) {
	t.Helper()
	got, err := d.State(context.Background(), pid)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("pid %d: state %s, want %s", pid, got, want)
	}
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// plainProcess starts a process that does not use CUDA.
func plainProcess(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("error %v: want it to mention %q", err, p)
		}
	}
}
