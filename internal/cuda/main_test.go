package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// The tests drive the fake driver through the real path: dlopen in a
// helper process re-executed from this test binary.

var (
	fakes     fakecuda.Paths
	faultsDir string
	driver    *testsupport.FakeDriver
)

func TestMain(m *testing.M) {
	// This test binary is also the driver's helper: the driver calls
	// re-execute it (helperExe), as they re-execute cryo, whose main
	// chooses the helper in the same way.
	if HelperRequested() {
		os.Exit(RunHelper())
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	if driver, err = testsupport.NewFakeDriver("cudacr-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer driver.Close()
	if fakes, err = driver.Paths(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	faultsDir = driver.Faults
	return m.Run()
}

// newDriver returns a Driver on the fake library with short deadlines.
func newDriver() *Driver {
	return New(Options{LibPath: fakes.LibCUDA, NVMLPath: fakes.LibNVML, CallTimeout: 5 * time.Second, CopyTimeout: 10 * time.Second})
}

// fault arms the fake driver's fault file for op on pid.
func fault(t *testing.T, op string, pid int, text string) {
	t.Helper()
	driver.Fault(t, op, pid, text)
}

// app is a running fakecuda-app (fakecuda.App).
type app = fakecuda.App

// startApp starts fakecuda-app ticking every 10 ms with 256 MiB.
func startApp(t *testing.T) *app { return fakecuda.StartApp(t, fakes, "10", "256") }

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

// mustRemedy fails unless err carries remedy as a value (report.Remedied),
// so that a report prints it in its place rather than parsing it out.
func mustRemedy(t *testing.T, err error, remedy string) {
	t.Helper()
	var rm report.Remedied
	if !errors.As(err, &rm) || rm.RemedyText() != remedy {
		t.Fatalf("error %v: want the remedy %q as a value, got %v", err, remedy, rm)
	}
}
