package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// freeze moves pid into a new v1 freezer cgroup and freezes it; undone at
// cleanup (before the process is killed: a frozen process cannot die).
func freeze(t *testing.T, pid int) {
	t.Helper()
	root := "/sys/fs/cgroup/freezer"
	dir := filepath.Join(root, fmt.Sprintf("cryo-cudacr-test-%d", pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("no v1 freezer here: %v", err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0o644)
		os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644)
		os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0o644); err != nil {
		t.Skipf("cannot join the freezer cgroup: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("FROZEN"), 0o644); err != nil {
		t.Skipf("cannot freeze: %v", err)
	}
}

// TestFrozenProcessTimesOut: like the real driver, the fake hangs on a
// frozen process; the helper is killed at the deadline.
func TestFrozenProcessTimesOut(t *testing.T) {
	a := startApp(t)
	freeze(t, a.PID)
	d := New(Options{LibPath: fakes.LibCUDA, CallTimeout: 300 * time.Millisecond})
	err := d.Lock(context.Background(), a.PID, 100*time.Millisecond)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("lock on a frozen process: %v, want ErrTimeout", err)
	}
	mustContain(t, err, "thaw")
}
