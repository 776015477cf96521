package runtime

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/cudacr"
	"github.com/cryo-gpu/cryo/cudacr/fakecuda"
)

// TestMain keeps the tests' locks out of the host's lock directory, and
// the fake driver's faults in a directory of their own. This test binary
// is also the driver's helper (cudacr's init).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cryo-runtime-test-")
	if err != nil {
		panic(err)
	}
	os.Setenv(EnvLockDir, filepath.Join(dir, "locks"))
	faultsDir = filepath.Join(dir, "faults")
	os.MkdirAll(faultsDir, 0o755)
	os.Setenv("CRYO_FAKE_CUDA_FAULTS", faultsDir)
	fakeRoot = filepath.Join(dir, "fake")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	faultsDir, fakeRoot string
	fakeOnce            sync.Once
	fakes               fakecuda.Paths
	fakeErr             error
)

// fakeDriver builds the fake driver once (gcc) and returns an orchestrator
// option that uses it.
func fakeDriver(t *testing.T) Option {
	t.Helper()
	fakeOnce.Do(func() { fakes, fakeErr = fakecuda.Build(fakeRoot) })
	if fakeErr != nil {
		t.Fatalf("build the fake driver: %v", fakeErr)
	}
	return WithDriverOptions(cudacr.Options{LibPath: fakes.LibCUDA, NVMLPath: fakes.LibNVML, CallTimeout: 5 * time.Second, CopyTimeout: 10 * time.Second})
}

// fakeApp is a running fakecuda-app: a CUDA process of the fake driver
// that checks its device memory every tick.
type fakeApp struct {
	pid  int
	tick atomic.Int64
	bad  atomic.Bool
}

func startFakeApp(t *testing.T) *fakeApp {
	t.Helper()
	cmd := exec.Command(fakes.App, "10", "64")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+fakes.Dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &fakeApp{pid: cmd.Process.Pid}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var n int64
			var state, sum string
			fmt.Sscanf(sc.Text(), "tick %d state=%s sum=%s", &n, &state, &sum)
			a.bad.Store(a.bad.Load() || sum != "OK")
			a.tick.Store(n)
		}
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-done; cmd.Wait() })
	a.ticks(t, 1)
	return a
}

// ticks waits for n more ticks with the device memory intact.
func (a *fakeApp) ticks(t *testing.T, n int64) {
	t.Helper()
	want := a.tick.Load() + n
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if a.bad.Load() {
			t.Fatalf("pid %d: device memory broken (sum=BAD)", a.pid)
		}
		if a.tick.Load() >= want {
			return
		}
	}
	t.Fatalf("pid %d: stuck at tick %d, want %d", a.pid, a.tick.Load(), want)
}

// fault arms the fake driver's fault file for op on pid.
func fault(t *testing.T, op string, pid int, text string) {
	t.Helper()
	path := filepath.Join(faultsDir, fmt.Sprintf("%s.%d", op, pid))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
}
