package orchestrate

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// TestMain keeps the tests' locks out of the host's lock directory, and
// the fake driver's faults in a directory of their own. This test binary
// is also the driver's helper (cudacr's init).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cryo-runtime-test-")
	if err != nil {
		panic(err)
	}
	testLocks = filepath.Join(dir, "locks")
	faultsDir = filepath.Join(dir, "faults")
	os.MkdirAll(faultsDir, 0o755)
	os.Setenv("CRYO_FAKE_CUDA_FAULTS", faultsDir)
	fakeRoot = filepath.Join(dir, "fake")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	faultsDir, fakeRoot, testLocks string
	fakeOnce                       sync.Once
	fakes                          fakecuda.Paths
	fakeErr                        error
)

// fakeDriver builds the fake driver once (gcc) and returns an orchestrator
// option that uses it.
func fakeDriver(t *testing.T) Option {
	t.Helper()
	fakeOnce.Do(func() { fakes, fakeErr = fakecuda.Build(fakeRoot) })
	if fakeErr != nil {
		t.Fatalf("build the fake driver: %v", fakeErr)
	}
	return func(o *Orchestrator) {
		testConfig(o)
		o.Driver = cuda.New(cuda.Options{LibPath: fakes.LibCUDA, NVMLPath: fakes.LibNVML, CallTimeout: 5 * time.Second, CopyTimeout: 10 * time.Second})
	}
}

// testConfig keeps the tests' locks out of the host's lock directory.
func testConfig(o *Orchestrator) { o.Config.LockDir = testLocks }

// fakeApp is a running fakecuda-app: a CUDA process of the fake driver
// that checks its device memory every tick.
type fakeApp = fakecuda.App

func startFakeApp(t *testing.T) *fakeApp { return fakecuda.StartApp(t, fakes, "10", "64") }

// fault arms the fake driver's fault file for op on pid.
func fault(t *testing.T, op string, pid int, text string) {
	fakecuda.Fault(t, faultsDir, op, pid, text)
}
