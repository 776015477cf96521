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
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"golang.org/x/sys/unix"
)

// runsIntact checks that p runs (alive, not stopped), with CUDA running by
// the driver's state and its device memory intact (the app checks its
// pattern on every tick and stops ticking on a mismatch).
func runsIntact(t *testing.T, env []string, p *harness.BareProc, out string) {
	t.Helper()
	if !p.Alive() {
		t.Fatalf("the workload died:\n%s\napp:\n%s", out, harness.Tail(p.Output(), 5))
	}
	if st := procfs.State(p.PID); st == "T" || st == "t" {
		t.Fatalf("the workload is left stopped (state %s):\n%s", st, out)
	}
	p.WaitTicks(t, p.LastTick(t)+3)
	bareTicksIncrease(t, p.Output())
	if page, err := fakecuda.ReadPage(p.PID); err != nil || page.State != 0 {
		t.Fatalf("driver state of the workload: %+v, %v\n%s", page, err, out)
	}
}

// TestGroupInterruptDuringDump: `kill -INT -PGID` while CRIU dumps: once
// while it writes the pages (its parasite is inside the workload), once
// held in its post-dump phase (the tree seized). CRIU used to share cryo's
// group and die of the signal with the tree in its hands, and cryo said
// "left running" of a workload that had died. Now CRIU ends its dump, cryo
// undoes the checkpoint, checks that every process runs, says so, and
// exits 130.
func TestGroupInterruptDuringDump(t *testing.T) {
	harness.RequireRoot(t)
	t.Run("pages", func(t *testing.T) {
		env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0", "FAKECUDA_BUFFER_KIB=393216")
		p := harness.BareStartFakeApp(t, env, nil)
		img := filepath.Join(t.TempDir(), "img")
		g := harness.StartGroupCryo(t, harness.CryoBin(t, "cryo"), env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
		harness.WaitFor(t, harness.BareTimeout, "CRIU to write pages", func() bool { return harness.DumpedBytes(img) > 16<<20 })
		g.SignalGroup(syscall.SIGINT)
		interruptedIntact(t, g, env, p)
	})
	t.Run("post-dump", func(t *testing.T) {
		hold, holdFile := harness.CRIUHoldEnv(t, "post-dump")
		env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
		p := harness.BareStartFakeApp(t, env, nil)
		img := filepath.Join(t.TempDir(), "img")
		g := harness.StartGroupCryo(t, harness.CryoBin(t, "cryo"), append(env, hold...), "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
		harness.WaitHold(t, holdFile, "CRIU's post-dump phase")
		g.SignalGroup(syscall.SIGINT)
		time.Sleep(500 * time.Millisecond) // the signal lands while CRIU holds the tree
		os.Remove(holdFile)
		interruptedIntact(t, g, env, p)
	})
}

// interruptedIntact waits for an interrupted checkpoint and checks that it
// exited 130, that the workload runs intact, and that cryo said so.
func interruptedIntact(t *testing.T, g *harness.GroupCryo, env []string, p *harness.BareProc) {
	t.Helper()
	code := g.Wait(t)
	out := g.Out.String()
	if code != 130 {
		t.Errorf("exit status %d after SIGINT to the group, want 130:\n%s", code, out)
	}
	runsIntact(t, env, p, out)
	harness.WantIn(t, out, "checked: every process was returned to running")
	if strings.Contains(out, "signal: interrupt") {
		t.Errorf("CRIU got the signal meant for cryo:\n%s", out)
	}
	t.Logf("cryo said:\n%s", out)
}

// TestSignalSweep: for every step of a checkpoint (read from the step
// runner's own table), with and without --leave-running, SIGINT, SIGTERM
// and SIGHUP to cryo's process group while cryo is held before the step,
// and SIGKILL to cryo alone and to its whole group. Each run ends with the
// workload running intact and cryo saying so with 128+signal, or, at the
// last write, with the checkpoint complete and the workload gone or
// running as the command intended (exit 0); a killed cryo leaves the tree
// running or stopped, and `cryo recover` brings it back.
func TestSignalSweep(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	for _, leave := range []bool{false, true} {
		mode := map[bool]string{false: "exit", true: "leave-running"}[leave]
		for _, step := range orchestrate.CheckpointSteps(true, leave) {
			for _, by := range []harness.StopBy{harness.ByINT, harness.ByTERM, harness.ByHUP, harness.ByKill, harness.ByKillGroup} {
				t.Run(mode+"/"+string(step)+"/"+by.String(), func(t *testing.T) {
					sweepOne(t, env, string(step), by, leave)
				})
			}
		}
	}
}

// sweepOne is one run of the sweep.
func sweepOne(t *testing.T, env []string, step string, by harness.StopBy, leave bool) {
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	hold := filepath.Join(t.TempDir(), "hold")
	args := []string{"checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img}
	if leave {
		args = append(args, "--leave-running")
	}
	g := harness.StartGroupCryo(t, harness.FailpointBin(t, "cryo"), append(env, "CRYO_TEST_HOLD="+step+":"+hold), args...)
	harness.WaitHold(t, hold, "cryo to reach step "+step)
	by.Send(g)
	if !by.Killed() {
		time.Sleep(100 * time.Millisecond)
	}
	os.Remove(hold)
	code := g.Wait(t)
	sweepOutcome(t, env, p, img, step, by.Sig, leave, code, g.Out.String())
}

// sweepOutcome checks one run of the sweep.
func sweepOutcome(t *testing.T, env []string, p *harness.BareProc, img, step string, sig syscall.Signal, leave bool, code int, out string) {
	t.Helper()
	switch {
	case sig == syscall.SIGKILL:
		// Held stopped (CUDA checkpointed, or a dump's stop) or running:
		// never lost, and recover is the one command that brings it back.
		harness.WaitFor(t, time.Minute, "no tracer to hold the workload", func() bool { return procfs.Tracer(p.PID) == 0 })
		if st := procfs.State(p.PID); st == "T" || st == "t" {
			harness.WantIn(t, harness.BareCryo(t, env, "ps"), "run cryo recover "+strconv.Itoa(p.PID))
			harness.WantIn(t, harness.BareCryo(t, env, "recover", strconv.Itoa(p.PID)), "recovered: checked")
		}
		runsIntact(t, env, p, out)
	case step == "final":
		// The seal is not interrupted: the checkpoint completes, and the
		// tree goes or runs on as the command intended.
		if code != 0 {
			t.Fatalf("exit %d after %s at the last write, want 0 (complete):\n%s", code, sig, out)
		}
		harness.WantIn(t, out, "written to")
		if leave {
			runsIntact(t, env, p, out)
			if ok, err := manifest.DumpCompleted(img, nil); !ok || err != nil {
				t.Fatalf("checkpoint not complete: %v", err)
			}
			return
		}
		harness.WaitFor(t, 10*time.Second, "the checkpointed tree to end", func() bool { return !p.Alive() })
		killDumped(t, p)
		bareRestoreVerified(t, env, p, img)
	default:
		if code != 128+int(sig) {
			t.Errorf("exit %d after %s to the group before %s, want %d:\n%s", code, sig, step, 128+int(sig), out)
		}
		runsIntact(t, env, p, out)
		harness.WantIn(t, out, "interrupted by "+unix.SignalName(sig), "checked: every process was returned to running")
	}
}

// TestRecoverAfterKillMidCopy: cryo SIGKILLed in the middle of the
// driver's copy of a checkpoint. The helper ends the copy and leaves the
// process stopped with CUDA checkpointed; `cryo ps` says to recover it,
// and `cryo recover PID` (CUDA first, then SIGCONT) lets it run on with its
// device memory intact.
func TestRecoverAfterKillMidCopy(t *testing.T) {
	harness.RequireRoot(t)
	faults := t.TempDir()
	env := append(harness.FakeDriverEnv(t, faults), "CRYO_DIGEST_WATCH=0")
	p := harness.BareStartFakeApp(t, env, nil)
	fault := filepath.Join(faults, "checkpoint")
	harness.WriteFile(t, fault, "midway 1500 once\n")
	g := harness.StartGroupCryo(t, harness.CryoBin(t, "cryo"), env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", filepath.Join(t.TempDir(), "img"))
	harness.WaitFor(t, 20*time.Second, "the driver's copy to begin", func() bool {
		_, err := os.Stat(fault)
		return os.IsNotExist(err)
	})
	time.Sleep(300 * time.Millisecond)
	g.Cmd.Process.Signal(syscall.SIGKILL)
	g.Wait(t)
	harness.AwaitHeld(t, p.PID)
	want := "stopped, CUDA checkpointed: run cryo recover " + strconv.Itoa(p.PID)
	harness.WantIn(t, harness.BareCryo(t, env, "ps"), want)
	out := harness.BareCryo(t, env, "recover", strconv.Itoa(p.PID))
	harness.WantIn(t, out, "recovered: checked", "CUDA resumed")
	runsIntact(t, env, p, out)
}

// TestClosedPipe: a reader that goes away (`| head -1`, `| head -c1`)
// costs nothing: no "broken pipe" noise, and a checkpoint runs to its end
// with the workload intact. The reader here is gone before cryo writes its
// first byte, so that every write of cryo's meets the closed pipe, not
// only the ones that come after a real head's exit.
func TestClosedPipe(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	code, stderr := closedStdout(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--leave-running", "--print-stats")
	if code != 0 || strings.Contains(stderr, "broken pipe") {
		t.Fatalf("cryo checkpoint | head -c1: exit %d:\n%s", code, stderr)
	}
	runsIntact(t, env, p, stderr)
	if ok, err := manifest.DumpCompleted(img, nil); !ok || err != nil {
		t.Fatalf("the checkpoint with a closed stdout is not complete: %v", err)
	}
	code, stderr = closedStdout(t, env, "inspect", img)
	if code != 0 || strings.Contains(stderr, "broken pipe") {
		t.Fatalf("cryo inspect | head -1: exit %d:\n%s", code, stderr)
	}
}

// closedStdout runs cryo with its stdout a pipe whose reader has gone, and
// returns its exit status and stderr.
func closedStdout(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	cmd := exec.Command(harness.CryoBin(t, "cryo"), args...)
	cmd.Env = append(os.Environ(), env...)
	stderr := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = w, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return harness.ExitCode(err), stderr.String()
	case <-time.After(harness.BareTimeout):
		cmd.Process.Kill()
		t.Fatalf("cryo %s with a closed stdout did not end:\n%s", args[0], stderr)
	}
	return -1, ""
}

// TestGroupInterruptDuringRestore: `kill -INT -PGID` while CRIU restores
// (held in its post-restore phase, the tree restored but not yet let go).
// cryo ends CRIU with its whole group, kills the half-restored tree and
// exits 130 within seconds, holding no lock and leaving no CRIU behind:
// a second restore of the unchanged checkpoint runs the workload on. It
// used to hang with CRIU a zombie and its child stopped under init.
func TestGroupInterruptDuringRestore(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	hold, holdFile := harness.CRIUHoldEnv(t, "post-restore")
	g := harness.StartGroupCryo(t, harness.CryoBin(t, "cryo"), append(env, hold...), "restore", "--dir", img)
	harness.WaitHold(t, holdFile, "CRIU's post-restore phase")
	criuPIDs := sessionOf(g.Cmd.Process.Pid)
	if len(criuPIDs) == 0 {
		t.Fatalf("no child of cryo leads a session of its own: CRIU shares cryo's group")
	}
	g.SignalGroup(syscall.SIGINT)
	start := time.Now()
	code := g.Wait(t)
	out := g.Out.String()
	if code != 130 || time.Since(start) > 30*time.Second {
		t.Fatalf("interrupted restore: exit %d after %s, want 130 within 30s:\n%s", code, time.Since(start), out)
	}
	for _, pid := range criuPIDs {
		harness.WaitFor(t, 10*time.Second, "CRIU's process "+strconv.Itoa(pid)+" to be gone", func() bool { return !procfs.Alive(pid) })
	}
	harness.WaitFor(t, 10*time.Second, "the half-restored tree to be reaped", func() bool { return !procfs.Exists(p.PID) })
	t.Logf("cryo said:\n%s", out)
	// The message says what was killed and what is kept, and the command
	// that restores the kept checkpoint again; the restore then proves it.
	harness.WantIn(t, out, "restore interrupted: interrupted by SIGINT",
		"CRIU was stopped and the processes it had restored were killed",
		"the checkpoint was not changed and is whole: run `cryo restore --dir "+img+"` to restore it again")
	bareRestoreVerified(t, env, p, img)
}

// sessionOf lists the children of parent that lead sessions of their own:
// CRIU, as cryo starts it.
func sessionOf(parent int) []int {
	var pids []int
	for _, pid := range procfs.Children(parent) {
		if sid, err := unix.Getsid(pid); err == nil && sid == pid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestPodmanGroupInterruptDuringDump: Ctrl-C on `podman container
// checkpoint` (SIGINT to Podman's whole group, cryo-runc included) while
// runc's CRIU holds the container in its post-dump phase. runc and its
// CRIU run in a group of their own and end the dump; cryo-runc gets the
// signal and decides. With --leave-running it undoes the checkpoint, and
// the container runs on with CUDA running and its memory intact. Without,
// the dump has ended the container as asked: cryo-runc completes the
// checkpoint, and `podman container restore` brings the workload back.
func TestPodmanGroupInterruptDuringDump(t *testing.T) {
	for _, leave := range []bool{true, false} {
		t.Run(map[bool]string{true: "leave-running", false: "exit"}[leave], func(t *testing.T) {
			hold, holdFile := harness.CRIUHoldEnv(t, "post-dump")
			p := harness.NewPodman(t, append(hold, "CRYO_DIGEST_WATCH=0")...)
			p.RunApp(t, "app")
			before := harness.PodmanLastTick(p.Ticks(t, "app"))
			args := append(append([]string{}, p.Args...), "container", "checkpoint", "app")
			if leave {
				args = append(args, "--leave-running")
			}
			g := harness.StartGroupCryo(t, "podman", p.Env, args...)
			harness.WaitHold(t, holdFile, "runc's CRIU to reach post-dump")
			g.SignalGroup(syscall.SIGINT)
			time.Sleep(500 * time.Millisecond)
			os.Remove(holdFile)
			g.Wait(t)
			harness.WaitFor(t, time.Minute, "cryo-runc to end", func() bool { return len(harness.PidsOf("cryo-runc", "checkpoint")) == 0 })
			t.Logf("podman after the interrupt: %s", strings.TrimSpace(g.Out.String()))
			if !leave {
				harness.WaitFor(t, 30*time.Second, "Podman to see the dumped container exit", func() bool { return p.State(t, "app") != "running" })
				if out, err := p.PodmanErr("container", "restore", "app"); err != nil {
					t.Fatalf("restore after the interrupted checkpoint: %v\n%s", err, out)
				}
			}
			if st := p.State(t, "app"); st != "running" {
				t.Fatalf("container is %s after the interrupted checkpoint:\n%s", st, g.Out)
			}
			p.RequireContinued(t, "app", before)
			if st := p.CUDAState(t, "app"); !strings.Contains(st, "running") || strings.Contains(st, "stopped") {
				t.Fatalf("CUDA after the interrupted checkpoint: %s", st)
			}
		})
	}
}
