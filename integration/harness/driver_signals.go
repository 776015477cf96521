package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// driverCase is one cell of the table: where cryo is stopped, and how.
type driverCase struct {
	Name string
	// hold is the checkpoint step cryo is held before (CRYO_TEST_HOLD);
	// "" when the moment is mid, reached while cryo runs.
	Hold string
	// mid is the action the signal lands in the middle of: "checkpoint"
	// (the driver's lock and copy out), "dump" (CRIU writing the pages),
	// "restore" (the driver's copy back and unlock, in the rollback that a
	// SIGINT at the hold began); "" for none.
	mid string
	sig syscall.Signal
}

// DriverCases: before the lock, mid-copy out, before the dump (CUDA
// checkpointed), mid-dump, and mid-rollback (the driver's restore after a
// SIGINT before the dump), each × SIGINT to the group and SIGKILL of cryo;
// the rollback's case is SIGINT then SIGKILL.
var DriverCases = []driverCase{
	{"before-lock/INT", "suspend", "", syscall.SIGINT},
	{"before-lock/KILL", "suspend", "", syscall.SIGKILL},
	{"mid-checkpoint/INT", "", "checkpoint", syscall.SIGINT},
	{"mid-checkpoint/KILL", "", "checkpoint", syscall.SIGKILL},
	{"before-dump/INT", "dump", "", syscall.SIGINT},
	{"before-dump/KILL", "dump", "", syscall.SIGKILL},
	{"mid-dump/INT", "", "dump", syscall.SIGINT},
	{"mid-dump/KILL", "", "dump", syscall.SIGKILL},
	{"mid-rollback-restore/KILL", "dump", "restore", syscall.SIGKILL},
}

// DriverRig is what the table needs of a driver and its workload.
type DriverRig struct {
	Env []string
	// start starts the workload and returns its pid.
	Start func(t *testing.T) int
	// arm prepares the moment mid (the fake driver's pause halfway); it
	// runs before cryo starts, or before the SIGINT that begins a rollback.
	Arm func(t *testing.T, mid string)
	// await returns once the signal would land in the middle of mid.
	Await func(t *testing.T, mid string, pid int, img string)
	// intact fails the test unless pid computes on with its device memory
	// verified; out is what cryo said, for the failure.
	Intact func(t *testing.T, pid int, out string)
}

// RunDriverCase runs one cell of the table on rig.
func RunDriverCase(t *testing.T, rig DriverRig, c driverCase) {
	pid := rig.Start(t)
	img := filepath.Join(t.TempDir(), "img")
	env := rig.Env
	hold := filepath.Join(t.TempDir(), "hold")
	if c.Hold != "" {
		env = append(env, "CRYO_TEST_HOLD="+c.Hold+":"+hold)
	} else {
		rig.Arm(t, c.mid)
	}
	g := StartGroupCryo(t, FailpointBin(t, "cryo"), env, "checkpoint", "--pid", strconv.Itoa(pid), "--dir", img)
	if c.Hold != "" {
		WaitHold(t, hold, "cryo to reach step "+c.Hold)
	}
	switch {
	case c.Hold != "" && c.mid == "restore":
		// A SIGINT begins the rollback; the kill lands in its driver restore.
		rig.Arm(t, c.mid)
		g.SignalGroup(syscall.SIGINT)
		WaitFor(t, 10*time.Second, "cryo to take the signal", func() bool { return strings.Contains(g.Out.String(), "received: stopping") })
		os.Remove(hold)
		rig.Await(t, c.mid, pid, img)
		g.Cmd.Process.Signal(syscall.SIGKILL)
	case c.Hold != "":
		stopCryo(t, g, c.sig)
		os.Remove(hold)
	default:
		rig.Await(t, c.mid, pid, img)
		stopCryo(t, g, c.sig)
	}
	start := time.Now()
	code := g.Wait(t)
	out := g.Out.String()
	t.Logf("exit %d %s after the signal:\n%s", code, time.Since(start).Round(time.Millisecond), Tail(out, 6))
	if c.sig == syscall.SIGKILL {
		recoverIfHeld(t, rig.Env, pid)
	} else {
		if code != 130 {
			t.Errorf("exit %d after SIGINT to the group, want 130", code)
		}
		WantIn(t, out, "interrupted by SIGINT", "checked: every process was returned to running")
		if c.Hold != "suspend" && strings.Contains(out, "CUDA untouched") {
			t.Errorf("cryo says CUDA was untouched after the driver was asked:\n%s", out)
		}
	}
	rig.Intact(t, pid, out)
}

// stopCryo sends sig: SIGKILL to cryo alone, anything else to its group.
func stopCryo(t *testing.T, g *GroupCryo, sig syscall.Signal) {
	t.Helper()
	if sig == syscall.SIGKILL {
		g.Cmd.Process.Signal(sig)
		return
	}
	g.SignalGroup(sig)
}

// recoverIfHeld waits for whatever cryo left (a helper ending its action,
// CRIU ending its dump) to let go of pid, then runs `cryo recover` if pid
// is held stopped: the one command cryo ps names for it.
func recoverIfHeld(t *testing.T, env []string, pid int) {
	t.Helper()
	WaitFor(t, 3*time.Minute, "no tracer to hold the workload", func() bool { return procfs.Tracer(pid) == 0 })
	time.Sleep(300 * time.Millisecond)
	if st := procfs.State(pid); st != "T" && st != "t" {
		return
	}
	out := Run(t, 3*time.Minute, env, CryoBin(t, "cryo"), "recover", strconv.Itoa(pid))
	t.Logf("cryo recover: %s", strings.TrimSpace(out))
	WantIn(t, out, "recovered: checked")
}
