package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// TestBareLockTimeoutRefused: a lock timeout that is not positive is a usage
// error (exit 2) before anything is touched, not silently replaced by the
// driver's default; the process keeps running.
func TestBareLockTimeoutRefused(t *testing.T) {
	harness.RequireRoot(t)
	p := harness.StartBare(t, nil, nil, "sleep 600 </dev/null")
	for _, args := range [][]string{
		{"checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", t.TempDir() + "/img", "--lock-timeout", "-5s"},
		{"cuda", "suspend", "--lock-timeout", "0s", strconv.Itoa(p.PID)},
	} {
		out, err := harness.RunErr(harness.BareTimeout, nil, harness.CryoBin(t, "cryo"), args...)
		if code := harness.ExitCode(err); code != 2 {
			t.Fatalf("cryo %v: exit %d, want 2:\n%s", args, code, out)
		}
		harness.WantIn(t, out, "--lock-timeout must be positive")
	}
	if !p.Alive() {
		t.Fatal("the process is gone")
	}
}

// TestBareManifestWithoutProcesses: a manifest that lists no CUDA process
// over images of one (altered, or written by another tool) used to restore
// with CUDA still suspended and exit 0, the app hung. The restore now
// resumes what it finds suspended, and the app ticks on.
func TestBareManifestWithoutProcesses(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WaitFor(t, 10*time.Second, "the dumped process to exit", func() bool { return !p.Alive() })
	before := p.LastTick(t)
	m, err := manifest.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	m.Processes, m.Needs = nil, nil
	if err := manifest.Write(img, m); err != nil {
		t.Fatal(err)
	}
	harness.BareCryo(t, env, "restore", "--dir", img)
	p.WaitTicks(t, before+5)
	harness.WantIn(t, harness.BareCryo(t, env, "cuda", "state", strconv.Itoa(p.PID)), "running")
}

// TestBareCopyTimeout: a driver copy that hangs holds the workload only
// until --copy-timeout (or $CRYO_COPY_TIMEOUT, which the shim and cryo-runc
// read too), not for the default ten minutes; the run then rolls back and
// the process carries on with CUDA running. A deadline that is not
// positive is a usage error.
func TestBareCopyTimeout(t *testing.T) {
	harness.RequireRoot(t)
	faults := t.TempDir()
	env := harness.FakeDriverEnv(t, faults)
	p := harness.BareStartFakeApp(t, env, nil)
	if err := os.WriteFile(filepath.Join(faults, "checkpoint."+strconv.Itoa(p.PID)), []byte("hang once"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{env, []string{"--copy-timeout", "3s"}},
		{append(env, "CRYO_COPY_TIMEOUT=3s"), nil},
	} {
		os.WriteFile(filepath.Join(faults, "checkpoint."+strconv.Itoa(p.PID)), []byte("hang once"), 0o644)
		start := time.Now()
		args := append([]string{"checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", filepath.Join(t.TempDir(), "img")}, c.args...)
		out, err := harness.RunErr(harness.BareTimeout, c.env, harness.CryoBin(t, "cryo"), args...)
		if err == nil {
			t.Fatalf("checkpoint over a hung copy succeeded:\n%s", out)
		}
		if took := time.Since(start); took > 60*time.Second {
			t.Fatalf("the hung copy held the process %s, the deadline was 3s:\n%s", took, out)
		}
		harness.WantIn(t, out, "step suspend")
		if !p.Alive() {
			t.Fatalf("the process is gone:\n%s", out)
		}
		p.WaitTicks(t, p.LastTick(t)+3)
		harness.WantIn(t, harness.BareCryo(t, env, "cuda", "state", strconv.Itoa(p.PID)), "running")
	}
	out, err := harness.RunErr(harness.BareTimeout, env, harness.CryoBin(t, "cryo"), "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", t.TempDir()+"/img", "--copy-timeout", "0s")
	if code := harness.ExitCode(err); code != 2 {
		t.Fatalf("--copy-timeout 0s: exit %d, want 2:\n%s", code, out)
	}
	harness.WantIn(t, out, "--copy-timeout must be positive")
}
