package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// TestBareLockTimeoutRefused: a lock timeout that is not positive is a usage
// error (exit 2) before anything is touched, not silently replaced by the
// driver's default; the process keeps running.
func TestBareLockTimeoutRefused(t *testing.T) {
	requireRoot(t)
	p := startBare(t, nil, nil, "sleep 600 </dev/null")
	for _, args := range [][]string{
		{"checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", t.TempDir() + "/img", "--lock-timeout", "-5s"},
		{"cuda", "suspend", "--lock-timeout", "0s", strconv.Itoa(p.pid)},
	} {
		out, err := runErr(bareTimeout, nil, cryoBin(t, "cryo"), args...)
		if code := exitCode(err); code != 2 {
			t.Fatalf("cryo %v: exit %d, want 2:\n%s", args, code, out)
		}
		wantIn(t, out, "--lock-timeout must be positive")
	}
	if !p.alive() {
		t.Fatal("the process is gone")
	}
}

// exitCode is the exit status of a finished command's error (0 for nil).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestBareManifestWithoutProcesses: a manifest that lists no CUDA process
// over images of one (altered, or written by another tool) used to restore
// with CUDA still suspended and exit 0, the app hung. The restore now
// resumes what it finds suspended, and the app ticks on.
func TestBareManifestWithoutProcesses(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	waitFor(t, 10*time.Second, "the dumped process to exit", func() bool { return !p.alive() })
	before := p.lastTick(t)
	m, err := manifest.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	m.Processes, m.Needs = nil, nil
	if err := manifest.Write(img, m); err != nil {
		t.Fatal(err)
	}
	bareCryo(t, env, "restore", "--dir", img)
	p.waitTicks(t, before+5)
	wantIn(t, bareCryo(t, env, "cuda", "state", strconv.Itoa(p.pid)), "running")
}

// TestBareCopyTimeout: a driver copy that hangs holds the workload only
// until --copy-timeout (or $CRYO_COPY_TIMEOUT, which the shim and cryo-runc
// read too), not for the default ten minutes; the run then rolls back and
// the process carries on with CUDA running. A deadline that is not
// positive is a usage error.
func TestBareCopyTimeout(t *testing.T) {
	requireRoot(t)
	faults := t.TempDir()
	env := fakeDriverEnv(t, faults)
	p := bareStartFakeApp(t, env, nil)
	if err := os.WriteFile(filepath.Join(faults, "checkpoint."+strconv.Itoa(p.pid)), []byte("hang once"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{env, []string{"--copy-timeout", "3s"}},
		{append(env, "CRYO_COPY_TIMEOUT=3s"), nil},
	} {
		os.WriteFile(filepath.Join(faults, "checkpoint."+strconv.Itoa(p.pid)), []byte("hang once"), 0o644)
		start := time.Now()
		args := append([]string{"checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", filepath.Join(t.TempDir(), "img")}, c.args...)
		out, err := runErr(bareTimeout, c.env, cryoBin(t, "cryo"), args...)
		if err == nil {
			t.Fatalf("checkpoint over a hung copy succeeded:\n%s", out)
		}
		if took := time.Since(start); took > 60*time.Second {
			t.Fatalf("the hung copy held the process %s, the deadline was 3s:\n%s", took, out)
		}
		wantIn(t, out, "step suspend")
		if !p.alive() {
			t.Fatalf("the process is gone:\n%s", out)
		}
		p.waitTicks(t, p.lastTick(t)+3)
		wantIn(t, bareCryo(t, env, "cuda", "state", strconv.Itoa(p.pid)), "running")
	}
	out, err := runErr(bareTimeout, env, cryoBin(t, "cryo"), "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", t.TempDir()+"/img", "--copy-timeout", "0s")
	if code := exitCode(err); code != 2 {
		t.Fatalf("--copy-timeout 0s: exit %d, want 2:\n%s", code, out)
	}
	wantIn(t, out, "--copy-timeout must be positive")
}
