package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// startMidAction starts `cryo cuda VERB PID` with the fake driver's op
// pausing halfway through its work, and returns once the op has begun.
func startMidAction(t *testing.T, env []string, faults, op, verb string, pid int) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	fault := filepath.Join(faults, op)
	harness.WriteFile(t, fault, "midway 1500 once\n")
	cmd := exec.Command(harness.CryoBin(t, "cryo"), "cuda", verb, strconv.Itoa(pid))
	out := &strings.Builder{}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// "once" removes the file as the driver's call begins; its work is a
	// few milliseconds from the halfway point.
	harness.WaitFor(t, 20*time.Second, "the driver's "+op+" to begin", func() bool {
		_, err := os.Stat(fault)
		return os.IsNotExist(err)
	})
	time.Sleep(300 * time.Millisecond)
	return cmd, out
}

// TestKilledCryoMidActionLosesNothing: SIGKILL of `cryo cuda suspend` in
// the middle of the driver's checkpoint, and of `cryo cuda resume` in the
// middle of its restore. Each time the process lives, held stopped, in the
// state the action reached (checkpointed; restored but locked), `cryo cuda
// state` says so, and `cryo cuda resume` brings it back with its device
// memory intact.
func TestKilledCryoMidActionLosesNothing(t *testing.T) {
	harness.RequireRoot(t)
	for _, c := range []struct{ verb, op, after string }{
		{"suspend", "checkpoint", "checkpointed (stopped)"},
		{"resume", "restore", "locked (stopped)"},
	} {
		t.Run(c.verb, func(t *testing.T) {
			faults := t.TempDir()
			env := harness.FakeDriverEnv(t, faults)
			p := harness.BareStartFakeApp(t, env, nil)
			spid := strconv.Itoa(p.PID)
			if c.verb == "resume" {
				harness.BareCryo(t, env, "cuda", "suspend", spid)
			}
			cmd, _ := startMidAction(t, env, faults, c.op, c.verb, p.PID)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			harness.AwaitHeld(t, p.PID)
			time.Sleep(200 * time.Millisecond) // the touch thread reads every millisecond
			if !p.Alive() {
				t.Fatalf("the app died after cryo was killed mid-%s:\n%s", c.op, harness.Tail(p.Output(), 5))
			}
			if st := harness.BareCryo(t, env, "cuda", "state", spid); !strings.Contains(st, c.after) {
				t.Fatalf("cryo cuda state after cryo was killed mid-%s: %q, want %q", c.op, st, c.after)
			}
			before := p.LastTick(t)
			harness.BareCryo(t, env, "cuda", "resume", spid)
			p.WaitTicks(t, before+3)
			bareTicksIncrease(t, p.Output())
		})
	}
}

// TestInterruptedSuspendMidCheckpoint: SIGINT, SIGTERM or SIGHUP to `cryo
// cuda suspend` in the middle of the driver's checkpoint. cryo waits for
// the checkpoint (killed there, it would leave the process half
// checkpointed), then rolls back: it exits with the signal's status and
// says so, and the process runs on with its device memory intact.
func TestInterruptedSuspendMidCheckpoint(t *testing.T) {
	harness.RequireRoot(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			faults := t.TempDir()
			env := harness.FakeDriverEnv(t, faults)
			p := harness.BareStartFakeApp(t, env, nil)
			cmd, out := startMidAction(t, env, faults, "checkpoint", "suspend", p.PID)
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			if err == nil || !strings.Contains(out.String(), "every process was returned to running") {
				t.Fatalf("cryo cuda suspend interrupted mid-checkpoint: %v\n%s", err, out)
			}
			before := p.LastTick(t)
			p.WaitTicks(t, before+3)
			bareTicksIncrease(t, p.Output())
			if st := harness.BareCryo(t, env, "cuda", "state", strconv.Itoa(p.PID)); !strings.Contains(st, "running") {
				t.Fatalf("cryo cuda state after the interrupted suspend: %q", st)
			}
		})
	}
}
