package orchestrate

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// TestMain keeps the tests' locks out of the host's lock directory, and
// the fake driver's faults in a directory of their own. This test binary
// is also the driver's helper: the driver calls re-execute it, as they
// re-execute cryo, whose main chooses the helper in the same way.
func TestMain(m *testing.M) {
	if cuda.HelperRequested() {
		os.Exit(cuda.RunHelper())
	}
	var err error
	if driver, err = testsupport.NewFakeDriver("cryo-orchestrate-test-"); err != nil {
		panic(err)
	}
	testLocks = filepath.Join(driver.Dir, "locks")
	code := m.Run()
	driver.Close()
	os.Exit(code)
}

var (
	driver    *testsupport.FakeDriver
	testLocks string
	fakes     fakecuda.Paths
)

// fakeDriver builds the fake driver once (gcc) and returns an orchestrator
// option that uses it.
func fakeDriver(t *testing.T) Option {
	t.Helper()
	var err error
	if fakes, err = driver.Paths(); err != nil {
		t.Fatalf("build the fake driver: %v", err)
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
	driver.Fault(t, op, pid, text)
}
