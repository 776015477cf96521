package gpu

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// gpuSignalMiB is large enough that the driver's copy lasts seconds (it
// moves 1.2–2 GiB/s), so that a signal lands in the middle of it.
const gpuSignalMiB = "8192"

// startDriverAction starts `cryo cuda VERB PID` and returns once the
// driver's action has begun: the process is locked, and a second later
// the copy is well under way.
func startDriverAction(t *testing.T, cryo, verb string, pid int) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(cryo, "cuda", verb, strconv.Itoa(pid))
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// cryo's helper traces the process from the driver's lock to the end
	// of the action; the lock and the seizing take milliseconds.
	harness.WaitFor(t, time.Minute, "the driver's action to begin", func() bool {
		return procfs.Tracer(pid) != 0
	})
	time.Sleep(1500 * time.Millisecond)
	return cmd, out
}

// gpuApp is a cudamem process with its log.
type gpuApp struct {
	pid int
	log string
}

func startGPUApp(t *testing.T) gpuApp {
	t.Helper()
	return startGPUAppMiB(t, gpuSignalMiB)
}

// startGPUAppMiB starts cudamem holding mib MiB of device memory.
func startGPUAppMiB(t *testing.T, mib string) gpuApp {
	t.Helper()
	reapOrphans(t)
	log := filepath.Join(t.TempDir(), "app.log")
	cmd := startDetached(t, log, cudamemBin(t), mib, "100")
	t.Cleanup(func() { killPid(cmd.Process.Pid) })
	a := gpuApp{pid: cmd.Process.Pid, log: log}
	harness.WaitTicks(t, a.Output, 2, "the workload's first ticks")
	return a
}

func (a gpuApp) Output() string { return harness.ReadFile(a.log) }

// ticksOn: the process lives and computes on, every tick verifying its
// device memory.
func (a gpuApp) ticksOn(t *testing.T, what string) {
	t.Helper()
	if !pidLives(a.pid) {
		t.Fatalf("the workload died %s:\n%s", what, harness.Tail(a.Output(), 10))
	}
	n := harness.LastTick(t, a.Output())
	after := harness.WaitTicks(t, a.Output, n+2, "ticks "+what)
	t.Logf("ticks %d → %d with verify=OK %s", n, after, what)
}

// TestGPUSignalsMidCopy: SIGKILL of `cryo cuda suspend` and of `cryo cuda
// resume` in the middle of the driver's copy, SIGINT of the suspend, and a
// suspend whose output pipe has no reader. Each leaves the workload alive,
// in a state `cryo cuda state` names, and `cryo cuda resume` (or the
// rollback) brings its memory back intact.
func TestGPUSignalsMidCopy(t *testing.T) {
	gpuOrSkip(t)
	cryo := harness.CryoBin(t, "cryo")
	resumeHeld := func(t *testing.T, a gpuApp, want string) {
		t.Helper()
		harness.AwaitHeld(t, a.pid)
		time.Sleep(300 * time.Millisecond)
		st := harness.Run(t, time.Minute, nil, cryo, "cuda", "state", strconv.Itoa(a.pid))
		if !strings.Contains(st, want) {
			t.Fatalf("cryo cuda state after cryo was killed: %q, want %q", st, want)
		}
		t.Logf("state after the kill: %s", strings.TrimSpace(st))
		report(t, "resume after the kill", harness.Timed(t, nil, cryo, "cuda", "resume", strconv.Itoa(a.pid)))
		a.ticksOn(t, "after `cryo cuda resume`")
	}

	t.Run("SIGKILL suspend", func(t *testing.T) {
		a := startGPUApp(t)
		cmd, _ := startDriverAction(t, cryo, "suspend", a.pid)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		resumeHeld(t, a, "checkpointed (stopped)")
	})
	t.Run("SIGKILL resume", func(t *testing.T) {
		a := startGPUApp(t)
		harness.Run(t, 2*time.Minute, nil, cryo, "cuda", "suspend", strconv.Itoa(a.pid))
		cmd, _ := startDriverAction(t, cryo, "resume", a.pid)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		resumeHeld(t, a, "(stopped)")
	})
	t.Run("SIGINT suspend", func(t *testing.T) {
		a := startGPUApp(t)
		cmd, out := startDriverAction(t, cryo, "suspend", a.pid)
		cmd.Process.Signal(syscall.SIGINT)
		err := cmd.Wait()
		if err == nil || !strings.Contains(out.String(), "every process was returned to running") {
			t.Fatalf("cryo cuda suspend interrupted mid-copy: %v\n%s", err, out)
		}
		t.Logf("interrupted:\n%s", harness.Tail(out.String(), 4))
		a.ticksOn(t, "after the interrupted suspend")
	})
	t.Run("SIGPIPE suspend", func(t *testing.T) {
		a := startGPUApp(t)
		// The reader exits at once: every write of cryo's meets a closed pipe.
		sh := exec.Command("sh", "-c", `"$0" cuda suspend "$1" 2>&1 | true; echo done`, cryo, strconv.Itoa(a.pid))
		if out, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		st := harness.Run(t, time.Minute, nil, cryo, "cuda", "state", strconv.Itoa(a.pid))
		if !strings.Contains(st, "checkpointed") {
			t.Fatalf("cryo cuda state after a suspend without a reader: %q, want checkpointed", st)
		}
		t.Logf("state after a suspend without a reader: %s", strings.TrimSpace(st))
		harness.Run(t, 2*time.Minute, nil, cryo, "cuda", "resume", strconv.Itoa(a.pid))
		a.ticksOn(t, "after the resume")
	})
}

// TestGPUGroupInterrupt: a terminal's Ctrl-C (SIGINT to cryo's whole
// process group) while CRIU dumps the host copy of the GPU memory, and
// SIGKILL of cryo in the middle of the driver's copy followed by `cryo
// recover`. CRIU used to share cryo's group and die of the signal with its
// parasite inside the workload (2 of 2 on an H200); cryo said "left
// running". Each now leaves the workload computing on with its memory
// verified, and cryo says what it checked.
func TestGPUGroupInterrupt(t *testing.T) {
	gpuOrSkip(t)
	cryo := harness.CryoBin(t, "cryo")
	t.Run("SIGINT to the group mid-dump", func(t *testing.T) {
		a := startGPUApp(t)
		img := filepath.Join(t.TempDir(), "img")
		g := harness.StartGroupCryo(t, cryo, nil, "checkpoint", "--pid", strconv.Itoa(a.pid), "--dir", img)
		harness.WaitFor(t, 3*time.Minute, "CRIU to write 1 GiB of pages", func() bool { return harness.DumpedBytes(img) > 1<<30 })
		g.SignalGroup(syscall.SIGINT)
		start := time.Now()
		code := g.Wait(t)
		out := g.Out.String()
		t.Logf("exit %d %s after the signal:\n%s", code, time.Since(start).Round(time.Millisecond), harness.Tail(out, 5))
		if code != 130 || !strings.Contains(out, "checked: every process was returned to running") {
			t.Fatalf("interrupted checkpoint: exit %d:\n%s", code, out)
		}
		a.ticksOn(t, "after the interrupted checkpoint")
	})
	t.Run("SIGKILL mid-copy, then recover", func(t *testing.T) {
		a := startGPUApp(t)
		g := harness.StartGroupCryo(t, cryo, nil, "checkpoint", "--pid", strconv.Itoa(a.pid), "--dir", filepath.Join(t.TempDir(), "img"))
		harness.WaitFor(t, time.Minute, "the driver's copy to begin", func() bool { return procfs.Tracer(a.pid) != 0 })
		time.Sleep(1500 * time.Millisecond)
		g.Cmd.Process.Signal(syscall.SIGKILL)
		g.Wait(t)
		harness.AwaitHeld(t, a.pid)
		if ps := harness.Run(t, time.Minute, nil, cryo, "ps"); !strings.Contains(ps, "run cryo recover "+strconv.Itoa(a.pid)) {
			t.Fatalf("cryo ps after the kill:\n%s", ps)
		}
		out := harness.Run(t, 2*time.Minute, nil, cryo, "recover", strconv.Itoa(a.pid))
		t.Logf("%s", strings.TrimSpace(out))
		if !strings.Contains(out, "recovered: checked") {
			t.Fatalf("cryo recover: %s", out)
		}
		a.ticksOn(t, "after cryo recover")
	})
}

// TestGPUSignalSweep: the driver table of driver_signals_test.go
// (DriverCases: before the lock, mid-copy out, before the dump, mid-dump,
// mid-rollback restore, each × SIGINT to cryo's group and SIGKILL of cryo
// then `cryo recover`) on the real driver, at 4 and 16 GiB of device
// memory; after each, cudamem verifies its device memory on every tick.
//
// Budget, one H200 (the driver copies at about 1.8 GiB/s out and three
// times that back): at 4 GiB every case takes about 10 s (90 s); at
// 16 GiB a suspend is about 9 s and a resume 3 s, the mid-dump cases wait
// for CRIU's whole 16 GiB dump (the dump is never cut short) and cost
// about 40 s each, the others about 25 s (200 s). The two before-lock
// cases are left out at 16 GiB: the driver has done nothing yet, so the
// size changes nothing. About 5 minutes in all, under the 8 allowed.
func TestGPUSignalSweep(t *testing.T) {
	gpuOrSkip(t)
	for _, mib := range []int{4096, 16384} {
		rig := gpuDriverRig(t, mib)
		for _, c := range harness.DriverCases {
			if mib > 4096 && c.Hold == "suspend" {
				continue
			}
			t.Run(strconv.Itoa(mib/1024)+"GiB/"+c.Name, func(t *testing.T) { harness.RunDriverCase(t, rig, c) })
		}
	}
}

// gpuDriverRig is the table's rig on the real driver: cudamem holding mib
// MiB, the signal timed to land halfway through the driver's copy (from
// the moment cryo's helper traces the process) or once CRIU has written
// 1 GiB of pages.
func gpuDriverRig(t *testing.T, mib int) harness.DriverRig {
	apps := map[int]gpuApp{}
	// Halfway through a copy at the driver's rates (1.8 GiB/s out, about
	// 5.4 GiB/s back), measured on an H200.
	half := map[string]time.Duration{
		"checkpoint": time.Duration(float64(mib)/1843/2*1000) * time.Millisecond,
		"restore":    time.Duration(float64(mib)/5530/2*1000) * time.Millisecond,
	}
	return harness.DriverRig{
		Start: func(t *testing.T) int {
			a := startGPUAppMiB(t, strconv.Itoa(mib))
			apps[a.pid] = a
			return a.pid
		},
		Arm: func(*testing.T, string) {},
		Await: func(t *testing.T, mid string, pid int, img string) {
			if mid == "dump" {
				harness.WaitFor(t, 5*time.Minute, "CRIU to write 1 GiB of pages", func() bool { return harness.DumpedBytes(img) > 1<<30 })
				return
			}
			harness.WaitFor(t, 2*time.Minute, "the driver's "+mid+" to begin", func() bool { return procfs.Tracer(pid) != 0 })
			time.Sleep(half[mid])
		},
		Intact: func(t *testing.T, pid int, _ string) { apps[pid].ticksOn(t, "after the signal") },
	}
}
