package cli

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// The fake application's touch thread faults if any thread runs while its
// GPU state is away (on in every test). `cryo cuda suspend` leaves the
// process held in a group stop, `cryo cuda state` says so (the driver is
// asked with the restore thread alone let run), and `cryo cuda resume`
// lets it go only once its GPU state is back: it lives, and ticks on.
func TestCUDASuspendHoldsThreads(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	spid := strconv.Itoa(p.PID)
	harness.BareCryo(t, env, "cuda", "suspend", spid)
	time.Sleep(300 * time.Millisecond) // the touch thread reads every millisecond
	if !p.Alive() {
		t.Fatalf("the app died while suspended:\n%s", harness.Tail(p.Output(), 5))
	}
	if !cuda.Stopped(p.PID) {
		t.Fatalf("pid %d is not held stopped while suspended", p.PID)
	}
	before := p.LastTick(t)
	if st := harness.BareCryo(t, env, "cuda", "state", spid); !strings.Contains(st, "checkpointed (stopped)") {
		t.Fatalf("cryo cuda state while suspended: %q", st)
	}
	time.Sleep(200 * time.Millisecond)
	if now := p.LastTick(t); now != before {
		t.Fatalf("the app ticked while suspended (%d → %d)", before, now)
	}
	harness.BareCryo(t, env, "cuda", "resume", spid)
	p.WaitTicks(t, before+3)
	if cuda.Stopped(p.PID) {
		t.Fatalf("pid %d still stopped after the resume", p.PID)
	}
}

// A reader of cryo's output that goes away must not kill cryo mid-way:
// `cryo checkpoint … 2>&1 | true` used to die of SIGPIPE at its first
// progress line with CUDA locked. Now the checkpoint completes (exit 0),
// and the checkpoint restores.
func TestCheckpointSurvivesClosedPipe(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	script := `"$0" checkpoint --pid "$1" --dir "$2" 2>&1 | true; exit ${PIPESTATUS[0]}`
	cmd := exec.Command("bash", "-c", script, harness.CryoBin(t, "cryo"), strconv.Itoa(p.PID), img)
	cmd.Env = append(cmd.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cryo checkpoint with its output piped into `true`: %v (exit 141 is SIGPIPE)\n%s", err, out)
	}
	if _, err := manifest.Read(img); err != nil {
		t.Fatalf("the checkpoint is not complete: %v", err)
	}
	harness.WaitFor(t, 10*time.Second, "the dumped process to exit", func() bool { return !p.Alive() })
	before := p.LastTick(t)
	harness.BareCryo(t, env, "restore", "--dir", img)
	p.WaitTicks(t, before+3)
}
