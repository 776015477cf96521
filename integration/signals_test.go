package integration

// Signals to cryo's process group: a terminal's Ctrl-C, `timeout -s INT`,
// systemd and CI runners signal the whole group, not cryo's pid. CRIU, runc
// and the driver helper run in sessions of their own, so only cryo gets
// the signal, and cryo decides what it means at each step: it finishes the
// step under way, then undoes the checkpoint (the workload runs on) or,
// once the workload is gone, completes it.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// criuHoldEnv makes CRIU hold in its action-script phase phase until the
// file it creates is removed: through $CRIU_CONFIG_FILE, which CRIU reads
// in RPC mode too, so that the shipped binary is held mid-dump. It returns
// the environment and the hold file.
func criuHoldEnv(t *testing.T, phase string) ([]string, string) {
	t.Helper()
	dir := t.TempDir()
	hold := filepath.Join(dir, "held")
	script := filepath.Join(dir, "hold.sh")
	writeFile(t, script, "#!/bin/sh\n[ \"$CRTOOLS_SCRIPT_ACTION\" = "+phase+" ] || exit 0\n"+
		": > "+hold+"\nn=0\nwhile [ -e "+hold+" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "criu.conf")
	writeFile(t, conf, "action-script "+script+"\n")
	return []string{"CRIU_CONFIG_FILE=" + conf}, hold
}

// groupCryo is a cryo command started as the leader of a process group of
// its own, as a shell starts a job.
type groupCryo struct {
	cmd *exec.Cmd
	out *strings.Builder
}

func startGroupCryo(t *testing.T, bin string, env []string, args ...string) *groupCryo {
	t.Helper()
	g := &groupCryo{cmd: exec.Command(bin, args...), out: &strings.Builder{}}
	g.cmd.Env = append(os.Environ(), env...)
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL); g.cmd.Wait() })
	return g
}

// signalGroup signals the whole group, as a terminal's Ctrl-C does.
func (g *groupCryo) signalGroup(sig syscall.Signal) { syscall.Kill(-g.cmd.Process.Pid, sig) }

// stopBy is one way a sweep stops cryo: a signal to its process group (a
// terminal's Ctrl-C, a supervisor's SIGTERM, or `kill -9 -PGID` taking
// cryo and everything in its group), or SIGKILL to cryo alone (an OOM
// kill). CRIU, runc and the driver helper run in groups of their own:
// a kill of cryo's group leaves them to end what they do.
type stopBy struct {
	sig   syscall.Signal
	group bool
}

// The ways every sweep goes through: the three signals cryo catches, to
// its group, and SIGKILL, to cryo alone and to its group.
var (
	byINT       = stopBy{syscall.SIGINT, true}
	byTERM      = stopBy{syscall.SIGTERM, true}
	byHUP       = stopBy{syscall.SIGHUP, true}
	byKill      = stopBy{syscall.SIGKILL, false}
	byKillGroup = stopBy{syscall.SIGKILL, true}
)

func (s stopBy) String() string {
	if s.sig == syscall.SIGKILL && s.group {
		return "SIGKILL-group"
	}
	return unix.SignalName(s.sig)
}

// killed: cryo had no say (SIGKILL).
func (s stopBy) killed() bool { return s.sig == syscall.SIGKILL }

// send stops g.
func (s stopBy) send(g *groupCryo) {
	if s.group {
		g.signalGroup(s.sig)
		return
	}
	g.cmd.Process.Signal(s.sig)
}

// wait returns cryo's exit status; a run past two minutes fails the test.
func (g *groupCryo) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- g.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("cryo: %v\n%s", err, g.out)
		}
		return 0
	case <-time.After(2 * time.Minute):
		t.Fatalf("cryo did not end within two minutes:\n%s", g.out)
	}
	return -1
}

// waitHold waits for a hold file to appear.
func waitHold(t *testing.T, hold, what string) {
	t.Helper()
	waitFor(t, bareTimeout, what, func() bool {
		_, err := os.Stat(hold)
		return err == nil
	})
}

// runsIntact checks that p runs (alive, not stopped), with CUDA running by
// the driver's state and its device memory intact (the app checks its
// pattern on every tick and stops ticking on a mismatch).
func runsIntact(t *testing.T, env []string, p *bareProc, out string) {
	t.Helper()
	if !p.alive() {
		t.Fatalf("the workload died:\n%s\napp:\n%s", out, tail(p.output(), 5))
	}
	if st := procfs.State(p.pid); st == "T" || st == "t" {
		t.Fatalf("the workload is left stopped (state %s):\n%s", st, out)
	}
	p.waitTicks(t, p.lastTick(t)+3)
	bareTicksIncrease(t, p.output())
	if page, err := fakecuda.ReadPage(p.pid); err != nil || page.State != 0 {
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
	requireRoot(t)
	t.Run("pages", func(t *testing.T) {
		env := append(fakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0", "FAKECUDA_BUFFER_KIB=393216")
		p := bareStartFakeApp(t, env, nil)
		img := filepath.Join(t.TempDir(), "img")
		g := startGroupCryo(t, cryoBin(t, "cryo"), env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
		waitFor(t, bareTimeout, "CRIU to write pages", func() bool { return dumpedBytes(img) > 16<<20 })
		g.signalGroup(syscall.SIGINT)
		interruptedIntact(t, g, env, p)
	})
	t.Run("post-dump", func(t *testing.T) {
		hold, holdFile := criuHoldEnv(t, "post-dump")
		env := append(fakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
		p := bareStartFakeApp(t, env, nil)
		img := filepath.Join(t.TempDir(), "img")
		g := startGroupCryo(t, cryoBin(t, "cryo"), append(env, hold...), "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
		waitHold(t, holdFile, "CRIU's post-dump phase")
		g.signalGroup(syscall.SIGINT)
		time.Sleep(500 * time.Millisecond) // the signal lands while CRIU holds the tree
		os.Remove(holdFile)
		interruptedIntact(t, g, env, p)
	})
}

// interruptedIntact waits for an interrupted checkpoint and checks that it
// exited 130, that the workload runs intact, and that cryo said so.
func interruptedIntact(t *testing.T, g *groupCryo, env []string, p *bareProc) {
	t.Helper()
	code := g.wait(t)
	out := g.out.String()
	if code != 130 {
		t.Errorf("exit status %d after SIGINT to the group, want 130:\n%s", code, out)
	}
	runsIntact(t, env, p, out)
	wantIn(t, out, "checked: every process was returned to running")
	if strings.Contains(out, "signal: interrupt") {
		t.Errorf("CRIU got the signal meant for cryo:\n%s", out)
	}
	t.Logf("cryo said:\n%s", out)
}

// dumpedBytes is the size of the page images CRIU has written into dir.
func dumpedBytes(dir string) int64 {
	var n int64
	m, _ := filepath.Glob(filepath.Join(dir, "pages-*.img"))
	for _, f := range m {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
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
	requireRoot(t)
	env := append(fakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	for _, leave := range []bool{false, true} {
		mode := map[bool]string{false: "exit", true: "leave-running"}[leave]
		for _, step := range orchestrate.CheckpointSteps(true, leave) {
			for _, by := range []stopBy{byINT, byTERM, byHUP, byKill, byKillGroup} {
				t.Run(mode+"/"+string(step)+"/"+by.String(), func(t *testing.T) {
					sweepOne(t, env, string(step), by, leave)
				})
			}
		}
	}
}

// sweepOne is one run of the sweep.
func sweepOne(t *testing.T, env []string, step string, by stopBy, leave bool) {
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	hold := filepath.Join(t.TempDir(), "hold")
	args := []string{"checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img}
	if leave {
		args = append(args, "--leave-running")
	}
	g := startGroupCryo(t, failpointBin(t, "cryo"), append(env, "CRYO_TEST_HOLD="+step+":"+hold), args...)
	waitHold(t, hold, "cryo to reach step "+step)
	by.send(g)
	if !by.killed() {
		time.Sleep(100 * time.Millisecond)
	}
	os.Remove(hold)
	code := g.wait(t)
	sweepOutcome(t, env, p, img, step, by.sig, leave, code, g.out.String())
}

// sweepOutcome checks one run of the sweep.
func sweepOutcome(t *testing.T, env []string, p *bareProc, img, step string, sig syscall.Signal, leave bool, code int, out string) {
	t.Helper()
	switch {
	case sig == syscall.SIGKILL:
		// Held stopped (CUDA checkpointed, or a dump's stop) or running:
		// never lost, and recover is the one command that brings it back.
		waitFor(t, time.Minute, "no tracer to hold the workload", func() bool { return procfs.Tracer(p.pid) == 0 })
		if st := procfs.State(p.pid); st == "T" || st == "t" {
			wantIn(t, bareCryo(t, env, "ps"), "run cryo recover "+strconv.Itoa(p.pid))
			wantIn(t, bareCryo(t, env, "recover", strconv.Itoa(p.pid)), "recovered: checked")
		}
		runsIntact(t, env, p, out)
	case step == "final":
		// The seal is not interrupted: the checkpoint completes, and the
		// tree goes or runs on as the command intended.
		if code != 0 {
			t.Fatalf("exit %d after %s at the last write, want 0 (complete):\n%s", code, sig, out)
		}
		wantIn(t, out, "written to")
		if leave {
			runsIntact(t, env, p, out)
			if ok, err := manifest.DumpCompleted(img, nil); !ok || err != nil {
				t.Fatalf("checkpoint not complete: %v", err)
			}
			return
		}
		waitFor(t, 10*time.Second, "the checkpointed tree to end", func() bool { return !p.alive() })
		killDumped(t, p)
		bareRestoreVerified(t, env, p, img)
	default:
		if code != 128+int(sig) {
			t.Errorf("exit %d after %s to the group before %s, want %d:\n%s", code, sig, step, 128+int(sig), out)
		}
		runsIntact(t, env, p, out)
		wantIn(t, out, "interrupted by "+unix.SignalName(sig), "checked: every process was returned to running")
	}
}

// TestRecoverAfterKillMidCopy: cryo SIGKILLed in the middle of the
// driver's copy of a checkpoint. The helper ends the copy and leaves the
// process stopped with CUDA checkpointed; `cryo ps` says to recover it,
// and `cryo recover PID` (CUDA first, then SIGCONT) lets it run on with its
// device memory intact.
func TestRecoverAfterKillMidCopy(t *testing.T) {
	requireRoot(t)
	faults := t.TempDir()
	env := append(fakeDriverEnv(t, faults), "CRYO_DIGEST_WATCH=0")
	p := bareStartFakeApp(t, env, nil)
	fault := filepath.Join(faults, "checkpoint")
	writeFile(t, fault, "midway 1500 once\n")
	g := startGroupCryo(t, cryoBin(t, "cryo"), env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", filepath.Join(t.TempDir(), "img"))
	waitFor(t, 20*time.Second, "the driver's copy to begin", func() bool {
		_, err := os.Stat(fault)
		return os.IsNotExist(err)
	})
	time.Sleep(300 * time.Millisecond)
	g.cmd.Process.Signal(syscall.SIGKILL)
	g.wait(t)
	awaitHeld(t, p.pid)
	want := "stopped, CUDA checkpointed: run cryo recover " + strconv.Itoa(p.pid)
	wantIn(t, bareCryo(t, env, "ps"), want)
	out := bareCryo(t, env, "recover", strconv.Itoa(p.pid))
	wantIn(t, out, "recovered: checked", "CUDA resumed")
	runsIntact(t, env, p, out)
}

// TestClosedPipe: a reader that goes away (`| head -1`, `| head -c1`)
// costs nothing: no "broken pipe" noise, and a checkpoint runs to its end
// with the workload intact. The reader here is gone before cryo writes its
// first byte, so that every write of cryo's meets the closed pipe, not
// only the ones that come after a real head's exit.
func TestClosedPipe(t *testing.T) {
	requireRoot(t)
	env := append(fakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	code, stderr := closedStdout(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img, "--leave-running", "--print-stats")
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
	cmd := exec.Command(cryoBin(t, "cryo"), args...)
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
		return exitCode(err), stderr.String()
	case <-time.After(bareTimeout):
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
	requireRoot(t)
	env := append(fakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	killDumped(t, p)
	hold, holdFile := criuHoldEnv(t, "post-restore")
	g := startGroupCryo(t, cryoBin(t, "cryo"), append(env, hold...), "restore", "--dir", img)
	waitHold(t, holdFile, "CRIU's post-restore phase")
	criuPIDs := sessionOf(g.cmd.Process.Pid)
	if len(criuPIDs) == 0 {
		t.Fatalf("no child of cryo leads a session of its own: CRIU shares cryo's group")
	}
	g.signalGroup(syscall.SIGINT)
	start := time.Now()
	code := g.wait(t)
	out := g.out.String()
	if code != 130 || time.Since(start) > 30*time.Second {
		t.Fatalf("interrupted restore: exit %d after %s, want 130 within 30s:\n%s", code, time.Since(start), out)
	}
	for _, pid := range criuPIDs {
		waitFor(t, 10*time.Second, "CRIU's process "+strconv.Itoa(pid)+" to be gone", func() bool { return !procfs.Alive(pid) })
	}
	waitFor(t, 10*time.Second, "the half-restored tree to be reaped", func() bool { return !procfs.Exists(p.pid) })
	t.Logf("cryo said:\n%s", out)
	// The message says what was killed and what is kept, and the command
	// that restores the kept checkpoint again; the restore then proves it.
	wantIn(t, out, "restore interrupted: interrupted by SIGINT",
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
			hold, holdFile := criuHoldEnv(t, "post-dump")
			p := newPodman(t, append(hold, "CRYO_DIGEST_WATCH=0")...)
			p.runApp(t, "app")
			before := podmanLastTick(p.ticks(t, "app"))
			args := append(append([]string{}, p.args...), "container", "checkpoint", "app")
			if leave {
				args = append(args, "--leave-running")
			}
			g := startGroupCryo(t, "podman", p.env, args...)
			waitHold(t, holdFile, "runc's CRIU to reach post-dump")
			g.signalGroup(syscall.SIGINT)
			time.Sleep(500 * time.Millisecond)
			os.Remove(holdFile)
			g.wait(t)
			waitFor(t, time.Minute, "cryo-runc to end", func() bool { return len(pidsOf("cryo-runc", "checkpoint")) == 0 })
			t.Logf("podman after the interrupt: %s", strings.TrimSpace(g.out.String()))
			if !leave {
				waitFor(t, 30*time.Second, "Podman to see the dumped container exit", func() bool { return p.state(t, "app") != "running" })
				if out, err := p.podmanErr("container", "restore", "app"); err != nil {
					t.Fatalf("restore after the interrupted checkpoint: %v\n%s", err, out)
				}
			}
			if st := p.state(t, "app"); st != "running" {
				t.Fatalf("container is %s after the interrupted checkpoint:\n%s", st, g.out)
			}
			p.requireContinued(t, "app", before)
			if st := p.cudaState(t, "app"); !strings.Contains(st, "running") || strings.Contains(st, "stopped") {
				t.Fatalf("CUDA after the interrupted checkpoint: %s", st)
			}
		})
	}
}
