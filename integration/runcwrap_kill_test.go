package integration

// SIGKILL to cryo-runc's whole process group (`kill -9 -PGID`, a
// supervisor that gives up on Podman and its runtime) while the
// orchestration is held before a step. cryo-runc has no say; runc, CRIU
// and the driver helper run in groups of their own and end what they do. The container must then run intact, or be held stopped with CUDA
// checkpointed, which `cryo recover PID` (the one command `cryo ps`
// names) brings back.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// TestRuncwrapKillSweep: `cryo-runc checkpoint --leave-running` before
// every step of the checkpoint's table, and the GPU-free pause before
// every step of its own, each with its group killed. Each case has a
// container of its own: a killed run may leave a held container and a
// pause record behind, which a shared one would carry into the next case.
// About 40 s here.
func TestRuncwrapKillSweep(t *testing.T) {
	requireRoot(t)
	for _, step := range orchestrate.CheckpointSteps(true, true) {
		t.Run("checkpoint/"+string(step), func(t *testing.T) {
			r, env := rwKillRig(t, "cryo-killck")
			img := filepath.Join(t.TempDir(), "img")
			rwKilled(t, r, env, "checkpoint", step, "checkpoint", "--leave-running", "--image-path", img, r.id)
			// The container can be checkpointed again: nothing of the
			// killed run (its lock, a held process) is in the way.
			run(t, time.Minute, nil, cryoBin(t, "cryo-runc"), "--cryo-env", r.envFile, "--root", r.root,
				"checkpoint", "--leave-running", "--image-path", filepath.Join(t.TempDir(), "again"), r.id)
			rwRunsIntact(t, r, "after a second checkpoint")
		})
	}
	for _, step := range orchestrate.PauseSteps() {
		t.Run("pause/"+string(step), func(t *testing.T) {
			r, env := rwKillRig(t, "cryo-killpause")
			rwKilled(t, r, env, "pause", step, "pause", r.id)
			if rwPaused(t, r) {
				t.Fatalf("the container is paused after its pause was killed before step %s", step)
			}
			// A pause and a resume work again: a record the killed pause
			// left is the new pause's to replace.
			run(t, time.Minute, nil, cryoBin(t, "cryo-runc"), "--cryo-env", r.envFile, "--root", r.root, "pause", r.id)
			run(t, time.Minute, nil, cryoBin(t, "cryo-runc"), "--cryo-env", r.envFile, "--root", r.root, "resume", r.id)
			rwRunsIntact(t, r, "after a pause and a resume")
		})
	}
}

// rwKillRig is a container of its own for one case, with a lock directory
// of its own (a killed pause's record lands there), and the environment a
// `cryo` command needs to reach the same fake driver and locks.
func rwKillRig(t *testing.T, name string) (rwRun, []string) {
	t.Helper()
	lockDir := "CRYO_LOCK_DIR=" + t.TempDir()
	r := rwStart(t, name, "CRYO_DIGEST_WATCH=0", lockDir)
	return r, append(fakeDriverEnv(t, ""), lockDir)
}

// rwKilled holds `cryo-runc ARGS…` before op's step, kills its group, and
// checks that the container runs intact, after `cryo recover` where the
// kill left it held.
func rwKilled(t *testing.T, r rwRun, env []string, op string, step orchestrate.StepName, args ...string) {
	t.Helper()
	g, hold := rwHeld(t, r, op, string(step), args...)
	byKillGroup.send(g)
	code, out := g.wait(t), g.out.String()
	os.Remove(hold)
	t.Logf("exit %d (killed):\n%s", code, out)
	pid := rwPID(t, r)
	if !procfs.Alive(pid) {
		t.Fatalf("the container's app died with cryo-runc killed before %s step %s", op, step)
	}
	waitFor(t, time.Minute, "no tracer to hold the app", func() bool { return procfs.Tracer(pid) == 0 })
	time.Sleep(300 * time.Millisecond) // a helper that ended its action has let go
	if rwHeldStill(pid) {
		ps := run(t, time.Minute, env, cryoBin(t, "cryo"), "ps")
		wantIn(t, ps, "run cryo recover "+strconv.Itoa(pid))
		rec := run(t, 3*time.Minute, env, cryoBin(t, "cryo"), "recover", strconv.Itoa(pid))
		t.Logf("cryo recover: %s", strings.TrimSpace(rec))
		wantIn(t, rec, "recovered: checked")
	}
	rwRunsIntact(t, r, out)
}

// rwHeldStill: the app is stopped, or the driver does not report its CUDA
// running.
func rwHeldStill(pid int) bool {
	if st := procfs.State(pid); st == "T" || st == "t" {
		return true
	}
	pg, err := fakecuda.ReadPage(pid)
	return err == nil && pg.State != 0
}
