package testsupport

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// FakeDriver is a test binary's fake CUDA driver: a temporary directory
// that holds the driver's libraries and programs, built on first use, and
// the directory of its fault files, which $CRYO_FAKE_CUDA_FAULTS names to
// every helper process the tests start.
type FakeDriver struct {
	Dir    string // the temporary directory; Close removes it
	Faults string // the fault files (Fault)

	once  sync.Once
	paths fakecuda.Paths
	err   error
}

// NewFakeDriver makes the directory (pattern as for os.MkdirTemp) and its
// fault directory, and sets, for this process and the helpers it starts,
// $CRYO_FAKE_CUDA_FAULTS and $GORACE (a race-enabled helper would
// otherwise sleep a second at exit). Call it from TestMain, and Close
// after m.Run.
func NewFakeDriver(pattern string) (*FakeDriver, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, err
	}
	f := &FakeDriver{Dir: dir, Faults: filepath.Join(dir, "faults")}
	if err := os.Mkdir(f.Faults, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	os.Setenv("CRYO_FAKE_CUDA_FAULTS", f.Faults)
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	return f, nil
}

// Paths builds the fake driver (gcc) into Dir/fake on the first call and
// returns where it is; later calls return the same.
func (f *FakeDriver) Paths() (fakecuda.Paths, error) {
	f.once.Do(func() { f.paths, f.err = fakecuda.Build(filepath.Join(f.Dir, "fake")) })
	return f.paths, f.err
}

// Fault arms the fake driver's fault file for op on pid (fakecuda.Fault).
func (f *FakeDriver) Fault(t testing.TB, op string, pid int, text string) {
	t.Helper()
	fakecuda.Fault(t, f.Faults, op, pid, text)
}

// Close removes Dir.
func (f *FakeDriver) Close() error { return os.RemoveAll(f.Dir) }
