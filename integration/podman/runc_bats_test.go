package podman

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestRuncCheckpointBats runs runc's own checkpoint acceptance suite
// (tests/integration/checkpoint.bats of the installed runc's source) with
// runc, then with cryo-runc as RUNC, through contrib/runc-bats.sh: every
// test that passes with runc must pass with cryo-runc. install-deps.sh
// installs bats and unpacks the source; without them the test skips and
// says so.
func TestRuncCheckpointBats(t *testing.T) {
	harness.RequireRoot(t)
	if _, err := exec.LookPath("bats"); err != nil {
		t.Skip("bats is not installed: run `make deps` (contrib/install-deps.sh installs it)")
	}
	src := filepath.Join(harness.DepsDir(), "runc-src")
	for _, f := range []string{"tests/integration/checkpoint.bats", "recvtty"} {
		if _, err := os.Stat(filepath.Join(src, f)); err != nil {
			t.Skipf("runc's source is not unpacked (%v): run `make deps` (contrib/install-deps.sh fetches it)", err)
		}
	}
	harness.CryoBin(t, "cryo-runc")
	harness.FakeFile(t, "libcuda.so.1")

	out, err := runBats(t, 8*time.Minute)
	t.Logf("contrib/runc-bats.sh:\n%s", out)
	if err != nil {
		t.Fatalf("runc's checkpoint.bats: a test that passes with runc fails with cryo-runc, or the run failed (%v); the lists above say which", err)
	}
}

// runBats runs contrib/runc-bats.sh in a process group of its own. On the
// deadline the group gets SIGTERM: bats and its tests end, and the script's
// cleanup deletes the containers they left; whatever still stands after
// that (or after a script that never got to its cleanup) is killed with
// the group.
func runBats(t *testing.T, timeout time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(harness.RepoRoot(), "contrib/runc-bats.sh"))
	cmd.Env = append(os.Environ(), "CRYO_BIN="+harness.BinDir(), "CRYO_DEPS="+harness.DepsDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if ctx.Err() != nil {
		return buf.String(), fmt.Errorf("timed out after %s: %w", timeout, err)
	}
	return buf.String(), err
}
