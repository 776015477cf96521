package integration

// The signal sweep for cryo-runc, called directly as Podman and CRI-O call
// it: a signal to cryo-runc's process group (a terminal's Ctrl-C on a
// `podman container checkpoint`, Podman's own SIGTERM) while the
// orchestration is held before a step. runc and its CRIU run in a group of
// their own; cryo-runc decides. And the exit status of a checkpoint that
// lost its workload is the CLI's: 4, or 3 with a complete checkpoint.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// rwPID is the container's init pid, from runc.
func rwPID(t *testing.T, r rwRun) int {
	t.Helper()
	out := run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", r.root, "state", r.id)
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
func rwHeld(t *testing.T, r rwRun, op, step string, args ...string) (*groupCryo, string) {
	t.Helper()
	hold := filepath.Join(t.TempDir(), "hold")
	all := append([]string{"--cryo-env", r.envFile, "--root", r.root}, args...)
	g := startGroupCryo(t, failpointBin(t, "cryo-runc"), []string{"CRYO_TEST_HOLD=" + op + "/" + step + ":" + hold}, all...)
	waitHold(t, hold, "cryo-runc to reach "+op+" step "+step)
	return g, hold
}

// rwRunsIntact: the container's app ticks on with its device memory
// verified, and the driver reports its CUDA running.
func rwRunsIntact(t *testing.T, r rwRun, out string) {
	t.Helper()
	pid := rwPID(t, r)
	if st := procfs.State(pid); st == "T" || st == "t" || !procfs.Alive(pid) {
		t.Fatalf("the container's app is gone or stopped (state %q):\n%s", st, out)
	}
	before := rwLastTick(r.out.String())
	waitFor(t, 20*time.Second, "the app to tick on", func() bool { return rwLastTick(r.out.String()) > before+2 })
	if pg, err := fakecuda.ReadPage(pid); err != nil || pg.State != 0 {
		t.Fatalf("driver state of the container's app: %+v, %v\n%s", pg, err, out)
	}
}

// TestRuncwrapSignalSweep: `cryo-runc checkpoint --leave-running` held
// before every step of the checkpoint's table, SIGINT to cryo-runc's
// group: the container runs on intact and cryo-runc says so, or, at the
// last write, the checkpoint completes. Then the GPU-free pause held
// before each of its steps, and its resume before each of its two. One
// container serves every case (each leaves it running); about 40 s here.
func TestRuncwrapSignalSweep(t *testing.T) {
	requireRoot(t)
	r := rwStart(t, "cryo-sigsweep", "CRYO_DIGEST_WATCH=0")
	for _, step := range orchestrate.CheckpointSteps(true, true) {
		t.Run("checkpoint/"+string(step), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img")
			g, hold := rwHeld(t, r, "checkpoint", string(step), "checkpoint", "--leave-running", "--image-path", img, r.id)
			g.signalGroup(syscall.SIGINT)
			time.Sleep(200 * time.Millisecond)
			os.Remove(hold)
			code, out := g.wait(t), g.out.String()
			t.Logf("exit %d:\n%s", code, out)
			rwRunsIntact(t, r, out)
			if step == "final" {
				if ok, err := manifest.DumpCompleted(img, nil); code != 0 || !ok || err != nil {
					t.Fatalf("exit %d at the last write, checkpoint complete %v (%v), want 0 and complete:\n%s", code, ok, err, out)
				}
				return
			}
			if code == 0 {
				t.Fatalf("an interrupted checkpoint exited 0:\n%s", out)
			}
			if step == orchestrate.StepFind {
				// Nothing was found, so nothing was touched: there is no
				// process list to check, and the message claims no check.
				wantIn(t, out, "the processes were left running, CUDA untouched")
				return
			}
			wantIn(t, out, "checked: every process was returned to running")
		})
	}
	rwPauseSweep(t, r)
}

// rwPauseSweep: SIGINT to cryo-runc's group before each step of the
// GPU-free pause, and of its resume. An interrupted pause rolls back (the
// container runs, CUDA resumed) unless it had frozen the container; an
// interrupted resume completes (it only gives back). Either way a resume
// brings the container back intact.
func rwPauseSweep(t *testing.T, r rwRun) {
	for _, step := range []orchestrate.StepName{orchestrate.StepFind, orchestrate.StepInventory, orchestrate.StepSuspend, orchestrate.StepRecord, orchestrate.StepFreeze} {
		t.Run("pause/"+string(step), func(t *testing.T) {
			g, hold := rwHeld(t, r, "pause", string(step), "pause", r.id)
			g.signalGroup(syscall.SIGINT)
			time.Sleep(200 * time.Millisecond)
			os.Remove(hold)
			code, out := g.wait(t), g.out.String()
			t.Logf("exit %d:\n%s", code, out)
			rwAfterPause(t, r, code, out)
		})
	}
	for _, step := range []orchestrate.StepName{orchestrate.StepThaw, orchestrate.StepResume} {
		t.Run("resume/"+string(step), func(t *testing.T) {
			run(t, time.Minute, nil, cryoBin(t, "cryo-runc"), "--cryo-env", r.envFile, "--root", r.root, "pause", r.id)
			g, hold := rwHeld(t, r, "resume", string(step), "resume", r.id)
			g.signalGroup(syscall.SIGINT)
			time.Sleep(200 * time.Millisecond)
			os.Remove(hold)
			code, out := g.wait(t), g.out.String()
			t.Logf("exit %d:\n%s", code, out)
			if code != 0 {
				t.Fatalf("an interrupted resume exited %d, want 0 (a resume is not undone):\n%s", code, out)
			}
			rwRunsIntact(t, r, out)
		})
	}
}

// rwAfterPause checks an interrupted pause: a pause that failed left the
// container running; one that completed left it paused, and the resume
// brings it back.
func rwAfterPause(t *testing.T, r rwRun, code int, out string) {
	t.Helper()
	state := run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", r.root, "state", r.id)
	paused := strings.Contains(state, `"status": "paused"`) || strings.Contains(state, `"status":"paused"`)
	switch {
	case code == 0 && paused:
		run(t, time.Minute, nil, cryoBin(t, "cryo-runc"), "--cryo-env", r.envFile, "--root", r.root, "resume", r.id)
	case code != 0 && !paused:
		wantIn(t, out, "stopped before this step: interrupt", "left running", "none needed; pause the container again")
	default:
		t.Fatalf("pause exited %d with the container %s:\n%s", code, state, out)
	}
	rwRunsIntact(t, r, out)
}

// TestRuncwrapLostExitStatus: the container's app dies while cryo-runc's
// checkpoint is held before the dump (an OOM kill, say). runc's dump
// fails, the rollback finds the process gone, and cryo-runc exits 4 (lost,
// no complete checkpoint), as the CLI does, not runc's status or 1:
// Podman shows it.
func TestRuncwrapLostExitStatus(t *testing.T) {
	requireRoot(t)
	r := rwStart(t, "cryo-lost", "CRYO_DIGEST_WATCH=0")
	pid := rwPID(t, r)
	img := filepath.Join(t.TempDir(), "img")
	g, hold := rwHeld(t, r, "checkpoint", string(orchestrate.StepDump), "checkpoint", "--leave-running", "--image-path", img, r.id)
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, 10*time.Second, "the app to die", func() bool { return !procfs.Alive(pid) })
	os.Remove(hold)
	code, out := g.wait(t), g.out.String()
	t.Logf("exit %d:\n%s", code, out)
	if code != 4 {
		t.Fatalf("cryo-runc exited %d after the workload died, want 4 (lost):\n%s", code, out)
	}
	wantIn(t, out, "died", "no complete checkpoint holds them")
}
