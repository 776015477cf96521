package podman

import (
	"encoding/json"
	"io"
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
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// rwPID is the container's init pid, from runc.
func rwPID(t *testing.T, r harness.RwRun) int {
	t.Helper()
	out := harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", r.Root, "state", r.ID)
	var st struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("runc state: %v: %s", err, out)
	}
	return st.Pid
}

// rwHeld starts `cryo-runc ARGS…` (the build with failpoints) in a group
// of its own, held before op's step, and waits for the hold.
func rwHeld(t *testing.T, r harness.RwRun, op, step string, args ...string) (*harness.GroupCryo, string) {
	t.Helper()
	hold := filepath.Join(t.TempDir(), "hold")
	all := append([]string{"--cryo-env", r.EnvFile, "--root", r.Root}, args...)
	g := harness.StartGroupCryo(t, harness.FailpointBin(t, "cryo-runc"), []string{"CRYO_TEST_HOLD=" + op + "/" + step + ":" + hold}, all...)
	harness.WaitHold(t, hold, "cryo-runc to reach "+op+" step "+step)
	return g, hold
}

// rwRunsIntact: the container's app ticks on with its device memory
// verified, and the driver reports its CUDA running.
func rwRunsIntact(t *testing.T, r harness.RwRun, out string) {
	t.Helper()
	pid := rwPID(t, r)
	if st := procfs.State(pid); st == "T" || st == "t" || !procfs.Alive(pid) {
		t.Fatalf("the container's app is gone or stopped (state %q):\n%s", st, out)
	}
	before := harness.RwLastTick(r.Out.String())
	harness.WaitFor(t, 20*time.Second, "the app to tick on", func() bool { return harness.RwLastTick(r.Out.String()) > before+2 })
	if pg, err := fakecuda.ReadPage(pid); err != nil || pg.State != 0 {
		t.Fatalf("driver state of the container's app: %+v, %v\n%s", pg, err, out)
	}
}

// TestRuncwrapSignalSweep: `cryo-runc checkpoint --leave-running` held
// before every step of the checkpoint's table, and SIGINT, SIGTERM and
// SIGHUP to cryo-runc's group: the container runs on intact, cryo-runc
// says so and exits 128+signal, or, at the last write, the checkpoint
// completes. Then the GPU-free pause held before each of its steps, and
// its resume before each of its two. One container serves every case
// (each leaves it running); about 50 s here.
//
// The three signals go to every checkpoint step: that is the sequence
// with the most to undo, and Podman's stop (SIGTERM), a terminal's Ctrl-C
// and a closed terminal's SIGHUP all reach it. cryo-runc turns all three
// into the same cancellation, and only the exit status and the name in
// the message tell them apart; so the pause, the resume and the restore
// take SIGINT at every step and SIGTERM and SIGHUP at a sample of theirs
// (rwSampled), which keeps the sweep under a minute.
func TestRuncwrapSignalSweep(t *testing.T) {
	harness.RequireRoot(t)
	r := harness.RwStart(t, "cryo-sigsweep", "CRYO_DIGEST_WATCH=0")
	for _, step := range orchestrate.CheckpointSteps(true, true) {
		for _, by := range []harness.StopBy{harness.ByINT, harness.ByTERM, harness.ByHUP} {
			t.Run("checkpoint/"+string(step)+"/"+by.String(), func(t *testing.T) {
				rwCheckpointSignal(t, r, step, by)
			})
		}
	}
	rwPauseSweep(t, r)
}

// rwCheckpointSignal holds a leave-running checkpoint before step, stops
// cryo-runc by, and checks what it says and left.
func rwCheckpointSignal(t *testing.T, r harness.RwRun, step orchestrate.StepName, by harness.StopBy) {
	img := filepath.Join(t.TempDir(), "img")
	g, hold := rwHeld(t, r, "checkpoint", string(step), "checkpoint", "--leave-running", "--image-path", img, r.ID)
	by.Send(g)
	time.Sleep(200 * time.Millisecond)
	os.Remove(hold)
	code, out := g.Wait(t), g.Out.String()
	t.Logf("exit %d:\n%s", code, out)
	rwRunsIntact(t, r, out)
	if step == "final" {
		if ok, err := manifest.DumpCompleted(img, nil); code != 0 || !ok || err != nil {
			t.Fatalf("exit %d at the last write, checkpoint complete %v (%v), want 0 and complete:\n%s", code, ok, err, out)
		}
		harness.WantIn(t, out, by.String()+" came once the command could no longer be undone: it completed")
		return
	}
	if code != 128+int(by.Sig) {
		t.Fatalf("exit %d after %s before step %s, want %d (interrupted, the container intact):\n%s", code, by, step, 128+int(by.Sig), out)
	}
	harness.WantIn(t, out, "interrupted by "+by.String(), "remedy: none needed")
	if step == orchestrate.StepFind {
		// Nothing was found, so nothing was touched: there is no
		// process list to check, and the message claims no check.
		harness.WantIn(t, out, "the processes were left running, CUDA untouched")
		return
	}
	harness.WantIn(t, out, "checked: every process was returned to running")
	if n := strings.Count(out, "returned to running"); n != 1 {
		t.Errorf("the message says %d times that the processes run, want once:\n%s", n, out)
	}
}

// rwSampled are the signals a pause, resume or restore step takes: SIGINT
// at every step, SIGTERM and SIGHUP at the step of the sample (see
// TestRuncwrapSignalSweep for why a sample does).
func rwSampled(step, termAt, hupAt orchestrate.StepName) []harness.StopBy {
	ways := []harness.StopBy{harness.ByINT}
	if step == termAt {
		ways = append(ways, harness.ByTERM)
	}
	if step == hupAt {
		ways = append(ways, harness.ByHUP)
	}
	return ways
}

// rwPauseSweep: a signal to cryo-runc's group before each step of the
// GPU-free pause, and of its resume. An interrupted pause rolls back (the
// container runs, CUDA resumed) unless it had frozen the container; an
// interrupted resume completes (it only gives back). Either way a resume
// brings the container back intact. The sample: SIGTERM where the pause
// has CUDA suspended and unrecorded, SIGHUP where it has recorded it;
// SIGTERM at the thaw and SIGHUP at the resume's CUDA step.
func rwPauseSweep(t *testing.T, r harness.RwRun) {
	for _, step := range orchestrate.PauseSteps() {
		for _, by := range rwSampled(step, orchestrate.StepRecord, orchestrate.StepFreeze) {
			t.Run("pause/"+string(step)+"/"+by.String(), func(t *testing.T) {
				g, hold := rwHeld(t, r, "pause", string(step), "pause", r.ID)
				by.Send(g)
				time.Sleep(200 * time.Millisecond)
				os.Remove(hold)
				code, out := g.Wait(t), g.Out.String()
				t.Logf("exit %d:\n%s", code, out)
				rwAfterPause(t, r, by, code, out)
			})
		}
	}
	for _, step := range []orchestrate.StepName{orchestrate.StepThaw, orchestrate.StepResume} {
		for _, by := range rwSampled(step, orchestrate.StepThaw, orchestrate.StepResume) {
			t.Run("resume/"+string(step)+"/"+by.String(), func(t *testing.T) {
				harness.Run(t, time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "pause", r.ID)
				g, hold := rwHeld(t, r, "resume", string(step), "resume", r.ID)
				by.Send(g)
				time.Sleep(200 * time.Millisecond)
				os.Remove(hold)
				code, out := g.Wait(t), g.Out.String()
				t.Logf("exit %d:\n%s", code, out)
				if code != 0 {
					t.Fatalf("an interrupted resume exited %d, want 0 (a resume is not undone):\n%s", code, out)
				}
				harness.WantIn(t, out, by.String()+" came once the command could no longer be undone: it completed")
				rwRunsIntact(t, r, out)
			})
		}
	}
}

// rwAfterPause checks an interrupted pause: a pause that failed left the
// container running, exited 128+signal and said so once, checked; one
// that completed left it paused, and the resume brings it back.
func rwAfterPause(t *testing.T, r harness.RwRun, by harness.StopBy, code int, out string) {
	t.Helper()
	paused := rwPaused(t, r)
	switch {
	case code == 0 && paused:
		harness.Run(t, time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "resume", r.ID)
	case code == 128+int(by.Sig) && !paused:
		harness.WantIn(t, out, "stopped before this step: interrupted by "+by.String(), "none needed; pause the container again")
		if !strings.Contains(out, "checked: every process was returned to running") {
			// Only where nothing was found to check (the find step).
			harness.WantIn(t, out, "the container was left running, CUDA untouched")
		}
	default:
		t.Fatalf("pause exited %d (want 0 paused, or %d running) with the container paused %v:\n%s", code, 128+int(by.Sig), paused, out)
	}
	rwRunsIntact(t, r, out)
}

// rwPaused says whether runc reports the container paused.
func rwPaused(t *testing.T, r harness.RwRun) bool {
	t.Helper()
	state := harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", r.Root, "state", r.ID)
	return strings.Contains(state, `"status": "paused"`) || strings.Contains(state, `"status":"paused"`)
}

// TestRuncwrapLostExitStatus: the container's app dies while cryo-runc's
// checkpoint is held before the dump (an OOM kill, say). runc's dump
// fails, the rollback finds the process gone, and cryo-runc exits 4 (lost,
// no complete checkpoint), as the CLI does, not runc's status or 1:
// Podman shows it.
func TestRuncwrapLostExitStatus(t *testing.T) {
	harness.RequireRoot(t)
	r := harness.RwStart(t, "cryo-lost", "CRYO_DIGEST_WATCH=0")
	pid := rwPID(t, r)
	img := filepath.Join(t.TempDir(), "img")
	g, hold := rwHeld(t, r, "checkpoint", string(orchestrate.StepDump), "checkpoint", "--leave-running", "--image-path", img, r.ID)
	syscall.Kill(pid, syscall.SIGKILL)
	harness.WaitFor(t, 10*time.Second, "the app to die", func() bool { return !procfs.Alive(pid) })
	os.Remove(hold)
	code, out := g.Wait(t), g.Out.String()
	t.Logf("exit %d:\n%s", code, out)
	if code != 4 {
		t.Fatalf("cryo-runc exited %d after the workload died, want 4 (lost):\n%s", code, out)
	}
	harness.WantIn(t, out, "died", "no complete checkpoint holds them")
}

// TestRuncwrapRestoreSignalSweep: `cryo-runc restore` held before each
// step of a container's restore (read from the restore's tables), SIGINT
// to cryo-runc's group, and SIGTERM before CRIU's restore and SIGHUP before
// the confinement (the sample of TestRuncwrapSignalSweep). Before CRIU is
// done nothing is left: no container in runc's state, no process in its
// cgroup, no CRIU holding the images, cryo-runc exits 128+signal, and the
// checkpoint restores again, which the next case proves; after CRIU, the
// restore completes, says so, and the container runs on intact. About 10 s.
func TestRuncwrapRestoreSignalSweep(t *testing.T) {
	harness.RequireRoot(t)
	r := harness.RwStart(t, "cryo-rsweep", "CRYO_DIGEST_WATCH=0")
	img := filepath.Join(r.Dir, "img")
	harness.Run(t, time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "checkpoint", "--image-path", img, "--work-path", filepath.Join(r.Dir, "w0"), r.ID)
	for _, step := range orchestrate.RestoreSteps(true) {
		for _, by := range rwSampled(step, orchestrate.StepRestore, orchestrate.StepConfine) {
			t.Run(string(step)+"/"+by.String(), func(t *testing.T) { rwRestoreSignal(t, &r, img, step, by) })
		}
	}
}

// rwRestoreSignal holds a restore of img before step, stops cryo-runc by,
// and checks what it left.
func rwRestoreSignal(t *testing.T, r *harness.RwRun, img string, step orchestrate.StepName, by harness.StopBy) {
	code, out, restored := rwInterruptedRestore(t, *r, img, string(step), by)
	t.Logf("exit %d:\n%s", code, out)
	if step == orchestrate.StepResume {
		if code != 0 {
			t.Fatalf("exit %d after %s past CRIU's restore, want 0 (completed):\n%s", code, by, out)
		}
		harness.WantIn(t, out, by.String()+" came once the command could no longer be undone: it completed")
		r.Out = restored
		rwRunsIntact(t, *r, out)
		if len(inCgroupOf(r.ID)) == 0 {
			t.Fatal("the running container has no process in its cgroups: the probe of the other cases sees nothing")
		}
		return
	}
	if code != 128+int(by.Sig) {
		t.Fatalf("an interrupted restore exited %d, want %d:\n%s", code, 128+int(by.Sig), out)
	}
	harness.WantIn(t, out, "restore interrupted: interrupted by "+by.String(), "the checkpoint was not changed and is whole")
	rwNothingRestored(t, *r, img, out)
}

// rwInterruptedRestore holds `cryo-runc restore` of img before step,
// stops it by, and returns its status, its output and what
// the restored container prints (its stdout is the restore's).
func rwInterruptedRestore(t *testing.T, r harness.RwRun, img, step string, by harness.StopBy) (int, string, *testsupport.Buffer) {
	t.Helper()
	hold := filepath.Join(t.TempDir(), "hold")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(harness.FailpointBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "restore", "--detach",
		"--image-path", img, "--work-path", filepath.Join(t.TempDir(), "w"), "--bundle", r.Bundle, r.ID)
	cmd.Env = append(os.Environ(), "CRYO_TEST_HOLD=restore/"+step+":"+hold)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	buf := &testsupport.Buffer{}
	go io.Copy(buf, pr)
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	harness.WaitHold(t, hold, "cryo-runc to reach restore step "+step)
	by.Send(&harness.GroupCryo{Cmd: cmd})
	time.Sleep(200 * time.Millisecond)
	os.Remove(hold)
	err = cmd.Wait()
	time.Sleep(100 * time.Millisecond) // the last lines through the pipe
	return harness.ExitCode(err), buf.String(), buf
}

// rwNothingRestored: runc knows no such container, no process is left in
// a cgroup of its, and no CRIU holds its images.
func rwNothingRestored(t *testing.T, r harness.RwRun, img, out string) {
	t.Helper()
	if st, err := harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", r.Root, "state", r.ID); err == nil {
		t.Fatalf("runc still knows the container after the interrupted restore:\n%s\n%s", st, out)
	}
	harness.WaitFor(t, 10*time.Second, "no process in the container's cgroups", func() bool { return len(inCgroupOf(r.ID)) == 0 })
	harness.WaitFor(t, 10*time.Second, "no CRIU to hold the checkpoint open", func() bool { return len(harness.HoldersOf("criu", img)) == 0 })
}

// inCgroupOf lists the processes whose cgroup path names id.
func inCgroupOf(id string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup"); strings.Contains(string(b), "/"+id) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestPodmanLostExitStatus: the same loss through Podman. Podman reports
// its runtime's exit status in its error, so that a user of `podman
// container checkpoint` reads cryo-runc's 4 (lost, no complete checkpoint)
// apart from a failure that left the container running. About 15 s.
func TestPodmanLostExitStatus(t *testing.T) {
	hold := filepath.Join(t.TempDir(), "hold")
	p := harness.NewPodman(t, "CRYO_TEST_HOLD=checkpoint/dump:"+hold, "CRYO_DIGEST_WATCH=0")
	p.WithRuntime(harness.FailpointBin(t, "cryo-runc")) // the hold is compiled only there
	p.RunApp(t, "app")
	pidText := strings.TrimSpace(p.Podman(t, "inspect", "--format", "{{.State.Pid}}", "app"))
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		t.Fatalf("container pid %q: %v", pidText, err)
	}
	g := harness.StartGroupCryo(t, "podman", p.Env, append(append([]string{}, p.Args...), "container", "checkpoint", "--leave-running", "app")...)
	harness.WaitHold(t, hold, "cryo-runc to reach the dump")
	syscall.Kill(pid, syscall.SIGKILL)
	harness.WaitFor(t, 10*time.Second, "the app to die", func() bool { return !procfs.Alive(pid) })
	os.Remove(hold)
	code, out := g.Wait(t), g.Out.String()
	t.Logf("podman exited %d:\n%s", code, out)
	if code == 0 {
		t.Fatalf("podman's checkpoint of a dead workload succeeded:\n%s", out)
	}
	harness.WantIn(t, out, "exit status 4", "no complete checkpoint holds them")
}

// TestPodmanInterruptedExitStatus: Podman's checkpoint with cryo-runc held
// before the dump (CUDA suspended), and SIGTERM to cryo-runc alone, as a
// supervisor that stops the runtime sends it (a signal to Podman's group
// would end Podman first, with nobody left to report). cryo-runc rolls
// back and exits 143, and Podman (exiting 125, its status for a failed
// runtime) quotes that status in its error, so that a user reads an
// interrupt that left the container running apart from a lost workload
// (3, 4) or a failure (1). About 5 s.
func TestPodmanInterruptedExitStatus(t *testing.T) {
	hold := filepath.Join(t.TempDir(), "hold")
	p := harness.NewPodman(t, "CRYO_TEST_HOLD=checkpoint/dump:"+hold, "CRYO_DIGEST_WATCH=0")
	p.WithRuntime(harness.FailpointBin(t, "cryo-runc")) // the hold is compiled only there
	p.RunApp(t, "app")
	id := strings.TrimSpace(p.Podman(t, "inspect", "--format", "{{.Id}}", "app"))
	pid, err := strconv.Atoi(strings.TrimSpace(p.Podman(t, "inspect", "--format", "{{.State.Pid}}", "app")))
	if err != nil {
		t.Fatal(err)
	}
	g := harness.StartGroupCryo(t, "podman", p.Env, append(append([]string{}, p.Args...), "container", "checkpoint", "--leave-running", "app")...)
	harness.WaitHold(t, hold, "cryo-runc to reach the dump")
	runtimes := harness.PidsOf("cryo-runc", "checkpoint", id)
	if len(runtimes) != 1 {
		t.Fatalf("cryo-runc checkpoint of %s: pids %v, want one", id, runtimes)
	}
	syscall.Kill(runtimes[0], syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	os.Remove(hold)
	code, out := g.Wait(t), g.Out.String()
	t.Logf("podman exited %d:\n%s", code, out)
	if code != 125 {
		// Podman's own status for a failed runtime; the runtime's is in its message.
		t.Fatalf("podman's interrupted checkpoint exited %d, want 125:\n%s", code, out)
	}
	harness.WantIn(t, out, "exit status 143", "interrupted by SIGTERM", "checked: every process was returned to running")
	if st := procfs.State(pid); st == "T" || st == "t" || !procfs.Alive(pid) {
		t.Fatalf("the container's app is gone or stopped (state %q):\n%s", st, out)
	}
	if pg, err := fakecuda.ReadPage(pid); err != nil || pg.State != 0 {
		t.Fatalf("driver state of the container's app: %+v, %v", pg, err)
	}
}
