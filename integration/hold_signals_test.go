package integration

// cryo killed or interrupted in the middle of a driver action on a process
// whose threads it holds. The action (the driver's checkpoint or restore)
// runs in a helper that is the threads' tracer, with the process's group
// stop lifted so that the driver's restore thread can work. Killed there,
// the helper used to die with cryo: the kernel detached the threads, and
// they ran on half-moved GPU state (the fake application's touch thread
// then faults, as JAX's threads did on a GPU). Now the helper outlives
// cryo, ends the action and holds the process again; an interrupt waits for
// the action and rolls back.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// startMidAction starts `cryo cuda VERB PID` with the fake driver's op
// pausing halfway through its work, and returns once the op has begun.
func startMidAction(t *testing.T, env []string, faults, op, verb string, pid int) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	fault := filepath.Join(faults, op)
	writeFile(t, fault, "midway 1500 once\n")
	cmd := exec.Command(cryoBin(t, "cryo"), "cuda", verb, strconv.Itoa(pid))
	out := &strings.Builder{}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// "once" removes the file as the driver's call begins; its work is a
	// few milliseconds from the halfway point.
	waitFor(t, 20*time.Second, "the driver's "+op+" to begin", func() bool {
		_, err := os.Stat(fault)
		return os.IsNotExist(err)
	})
	time.Sleep(300 * time.Millisecond)
	return cmd, out
}

// awaitHeld waits until no tracer holds pid's threads and every thread is
// stopped: the helper has ended its action and let go of a held process.
func awaitHeld(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, 20*time.Second, "the process to be held stopped, with no tracer", func() bool {
		tids, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*")
		for _, d := range tids {
			tid, _ := strconv.Atoi(filepath.Base(d))
			if procfs.ThreadTracer(tid) != 0 {
				return false
			}
		}
		return cuda.Stopped(pid)
	})
}

// TestKilledCryoMidActionLosesNothing: SIGKILL of `cryo cuda suspend` in
// the middle of the driver's checkpoint, and of `cryo cuda resume` in the
// middle of its restore. Each time the process lives, held stopped, in the
// state the action reached (checkpointed; restored but locked), `cryo cuda
// state` says so, and `cryo cuda resume` brings it back with its device
// memory intact.
func TestKilledCryoMidActionLosesNothing(t *testing.T) {
	requireRoot(t)
	for _, c := range []struct{ verb, op, after string }{
		{"suspend", "checkpoint", "checkpointed (stopped)"},
		{"resume", "restore", "locked (stopped)"},
	} {
		t.Run(c.verb, func(t *testing.T) {
			faults := t.TempDir()
			env := fakeDriverEnv(t, faults)
			p := bareStartFakeApp(t, env, nil)
			spid := strconv.Itoa(p.pid)
			if c.verb == "resume" {
				bareCryo(t, env, "cuda", "suspend", spid)
			}
			cmd, _ := startMidAction(t, env, faults, c.op, c.verb, p.pid)
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			awaitHeld(t, p.pid)
			time.Sleep(200 * time.Millisecond) // the touch thread reads every millisecond
			if !p.alive() {
				t.Fatalf("the app died after cryo was killed mid-%s:\n%s", c.op, tail(p.output(), 5))
			}
			if st := bareCryo(t, env, "cuda", "state", spid); !strings.Contains(st, c.after) {
				t.Fatalf("cryo cuda state after cryo was killed mid-%s: %q, want %q", c.op, st, c.after)
			}
			before := p.lastTick(t)
			bareCryo(t, env, "cuda", "resume", spid)
			p.waitTicks(t, before+3)
			bareTicksIncrease(t, p.output())
		})
	}
}

// TestInterruptedSuspendMidCheckpoint: SIGINT, SIGTERM or SIGHUP to `cryo
// cuda suspend` in the middle of the driver's checkpoint. cryo waits for
// the checkpoint (killed there, it would leave the process half
// checkpointed), then rolls back: it exits with the signal's status and
// says so, and the process runs on with its device memory intact.
func TestInterruptedSuspendMidCheckpoint(t *testing.T) {
	requireRoot(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			faults := t.TempDir()
			env := fakeDriverEnv(t, faults)
			p := bareStartFakeApp(t, env, nil)
			cmd, out := startMidAction(t, env, faults, "checkpoint", "suspend", p.pid)
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			if err == nil || !strings.Contains(out.String(), "every process was returned to running") {
				t.Fatalf("cryo cuda suspend interrupted mid-checkpoint: %v\n%s", err, out)
			}
			before := p.lastTick(t)
			p.waitTicks(t, before+3)
			bareTicksIncrease(t, p.output())
			if st := bareCryo(t, env, "cuda", "state", strconv.Itoa(p.pid)); !strings.Contains(st, "running") {
				t.Fatalf("cryo cuda state after the interrupted suspend: %q", st)
			}
		})
	}
}
