package integration

// The driver's steps of a checkpoint × the two ways a user stops cryo: a
// terminal's Ctrl-C (SIGINT to cryo's group) and SIGKILL of cryo followed
// by `cryo recover`. One table, run on the fake driver here
// (TestDriverSignalSweep) and on the real one by TestGPUSignalSweep: a
// rig says how to start the workload, how to land in the middle of a
// driver action, and how to check that the workload's device memory is
// intact.

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
	name string
	// hold is the checkpoint step cryo is held before (CRYO_TEST_HOLD);
	// "" when the moment is mid, reached while cryo runs.
	hold string
	// mid is the action the signal lands in the middle of: "checkpoint"
	// (the driver's lock and copy out), "dump" (CRIU writing the pages),
	// "restore" (the driver's copy back and unlock, in the rollback that a
	// SIGINT at the hold began); "" for none.
	mid string
	sig syscall.Signal
}

// driverCases: before the lock, mid-copy out, before the dump (CUDA
// checkpointed), mid-dump, and mid-rollback (the driver's restore after a
// SIGINT before the dump), each × SIGINT to the group and SIGKILL of cryo;
// the rollback's case is SIGINT then SIGKILL.
var driverCases = []driverCase{
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

// driverRig is what the table needs of a driver and its workload.
type driverRig struct {
	env []string
	// start starts the workload and returns its pid.
	start func(t *testing.T) int
	// arm prepares the moment mid (the fake driver's pause halfway); it
	// runs before cryo starts, or before the SIGINT that begins a rollback.
	arm func(t *testing.T, mid string)
	// await returns once the signal would land in the middle of mid.
	await func(t *testing.T, mid string, pid int, img string)
	// intact fails the test unless pid computes on with its device memory
	// verified; out is what cryo said, for the failure.
	intact func(t *testing.T, pid int, out string)
}

// runDriverCase runs one cell of the table on rig.
func runDriverCase(t *testing.T, rig driverRig, c driverCase) {
	pid := rig.start(t)
	img := filepath.Join(t.TempDir(), "img")
	env := rig.env
	hold := filepath.Join(t.TempDir(), "hold")
	if c.hold != "" {
		env = append(env, "CRYO_TEST_HOLD="+c.hold+":"+hold)
	} else {
		rig.arm(t, c.mid)
	}
	g := startGroupCryo(t, failpointBin(t, "cryo"), env, "checkpoint", "--pid", strconv.Itoa(pid), "--dir", img)
	if c.hold != "" {
		waitHold(t, hold, "cryo to reach step "+c.hold)
	}
	switch {
	case c.hold != "" && c.mid == "restore":
		// A SIGINT begins the rollback; the kill lands in its driver restore.
		rig.arm(t, c.mid)
		g.signalGroup(syscall.SIGINT)
		waitFor(t, 10*time.Second, "cryo to take the signal", func() bool { return strings.Contains(g.out.String(), "received: stopping") })
		os.Remove(hold)
		rig.await(t, c.mid, pid, img)
		g.cmd.Process.Signal(syscall.SIGKILL)
	case c.hold != "":
		stopCryo(t, g, c.sig)
		os.Remove(hold)
	default:
		rig.await(t, c.mid, pid, img)
		stopCryo(t, g, c.sig)
	}
	start := time.Now()
	code := g.wait(t)
	out := g.out.String()
	t.Logf("exit %d %s after the signal:\n%s", code, time.Since(start).Round(time.Millisecond), tail(out, 6))
	if c.sig == syscall.SIGKILL {
		recoverIfHeld(t, rig.env, pid)
	} else {
		if code != 130 {
			t.Errorf("exit %d after SIGINT to the group, want 130", code)
		}
		wantIn(t, out, "interrupted by SIGINT", "checked: every process was returned to running")
		if c.hold != "suspend" && strings.Contains(out, "CUDA untouched") {
			t.Errorf("cryo says CUDA was untouched after the driver was asked:\n%s", out)
		}
	}
	rig.intact(t, pid, out)
}

// stopCryo sends sig: SIGKILL to cryo alone, anything else to its group.
func stopCryo(t *testing.T, g *groupCryo, sig syscall.Signal) {
	t.Helper()
	if sig == syscall.SIGKILL {
		g.cmd.Process.Signal(sig)
		return
	}
	g.signalGroup(sig)
}

// recoverIfHeld waits for whatever cryo left (a helper ending its action,
// CRIU ending its dump) to let go of pid, then runs `cryo recover` if pid
// is held stopped: the one command cryo ps names for it.
func recoverIfHeld(t *testing.T, env []string, pid int) {
	t.Helper()
	waitFor(t, 3*time.Minute, "no tracer to hold the workload", func() bool { return procfs.Tracer(pid) == 0 })
	time.Sleep(300 * time.Millisecond)
	if st := procfs.State(pid); st != "T" && st != "t" {
		return
	}
	out := run(t, 3*time.Minute, env, cryoBin(t, "cryo"), "recover", strconv.Itoa(pid))
	t.Logf("cryo recover: %s", strings.TrimSpace(out))
	wantIn(t, out, "recovered: checked")
}

// fakeDriverRig is the table's rig on the fake driver: fakecuda-app with
// a 384 MiB buffer (so that CRIU's dump takes a moment), the driver's
// actions paused halfway by its fault file.
func fakeDriverRig(t *testing.T) driverRig {
	faults := t.TempDir()
	env := append(fakeDriverEnv(t, faults), "CRYO_DIGEST_WATCH=0", "FAKECUDA_BUFFER_KIB=393216")
	procs := map[int]*bareProc{}
	return driverRig{
		env: env,
		start: func(t *testing.T) int {
			p := bareStartFakeApp(t, env, nil)
			procs[p.pid] = p
			return p.pid
		},
		arm: func(t *testing.T, mid string) {
			if mid == "checkpoint" || mid == "restore" {
				writeFile(t, filepath.Join(faults, mid), "midway 1500 once\n")
			}
		},
		await: func(t *testing.T, mid string, pid int, img string) {
			if mid == "dump" {
				waitFor(t, bareTimeout, "CRIU to write pages", func() bool { return dumpedBytes(img) > 16<<20 })
				return
			}
			// "once" removes the file as the driver's call begins.
			waitFor(t, time.Minute, "the driver's "+mid+" to begin", func() bool {
				_, err := os.Stat(filepath.Join(faults, mid))
				return os.IsNotExist(err)
			})
			time.Sleep(300 * time.Millisecond)
		},
		intact: func(t *testing.T, pid int, out string) { runsIntact(t, env, procs[pid], out) },
	}
}

// TestDriverSignalSweep: the driver table (driverCases) on the fake
// driver. About 40 s here.
func TestDriverSignalSweep(t *testing.T) {
	requireRoot(t)
	rig := fakeDriverRig(t)
	for _, c := range driverCases {
		t.Run(c.name, func(t *testing.T) { runDriverCase(t, rig, c) })
	}
}
