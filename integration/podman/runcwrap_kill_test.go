package podman

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
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
	harness.RequireRoot(t)
	for _, step := range orchestrate.CheckpointSteps(true, true) {
		t.Run("checkpoint/"+string(step), func(t *testing.T) {
			r, env := rwKillRig(t, "cryo-killck")
			img := filepath.Join(t.TempDir(), "img")
			rwKilled(t, r, env, "checkpoint", step, "checkpoint", "--leave-running", "--image-path", img, r.ID)
			// The container can be checkpointed again: nothing of the
			// killed run (its lock, a held process) is in the way.
			harness.Run(t, time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root,
				"checkpoint", "--leave-running", "--image-path", filepath.Join(t.TempDir(), "again"), r.ID)
			rwRunsIntact(t, r, "after a second checkpoint")
		})
	}
	for _, step := range orchestrate.PauseSteps() {
		t.Run("pause/"+string(step), func(t *testing.T) {
			r, env := rwKillRig(t, "cryo-killpause")
			rwKilled(t, r, env, "pause", step, "pause", r.ID)
			if rwPaused(t, r) {
				t.Fatalf("the container is paused after its pause was killed before step %s", step)
			}
			// A pause and a resume work again: a record the killed pause
			// left is the new pause's to replace.
			harness.Run(t, time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "pause", r.ID)
			harness.Run(t, time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "resume", r.ID)
			rwRunsIntact(t, r, "after a pause and a resume")
		})
	}
}

// rwKillRig is a container of its own for one case, with a lock directory
// of its own (a killed pause's record lands there), and the environment a
// `cryo` command needs to reach the same fake driver and locks.
func rwKillRig(t *testing.T, name string) (harness.RwRun, []string) {
	t.Helper()
	lockDir := "CRYO_LOCK_DIR=" + t.TempDir()
	r := harness.RwStart(t, name, "CRYO_DIGEST_WATCH=0", lockDir)
	return r, append(harness.FakeDriverEnv(t, ""), lockDir)
}

// rwKilled holds `cryo-runc ARGS…` before op's step, kills its group, and
// checks that the container runs intact, after `cryo recover` where the
// kill left it held.
func rwKilled(t *testing.T, r harness.RwRun, env []string, op string, step orchestrate.StepName, args ...string) {
	t.Helper()
	g, hold := rwHeld(t, r, op, string(step), args...)
	harness.ByKillGroup.Send(g)
	code, out := g.Wait(t), g.Out.String()
	os.Remove(hold)
	t.Logf("exit %d (killed):\n%s", code, out)
	pid := rwPID(t, r)
	if !procfs.Alive(pid) {
		t.Fatalf("the container's app died with cryo-runc killed before %s step %s", op, step)
	}
	harness.WaitFor(t, time.Minute, "no tracer to hold the app", func() bool { return procfs.Tracer(pid) == 0 })
	time.Sleep(300 * time.Millisecond) // a helper that ended its action has let go
	if rwHeldStill(pid) {
		ps := harness.Run(t, time.Minute, env, harness.CryoBin(t, "cryo"), "ps")
		harness.WantIn(t, ps, "run cryo recover "+strconv.Itoa(pid))
		rec := harness.Run(t, 3*time.Minute, env, harness.CryoBin(t, "cryo"), "recover", strconv.Itoa(pid))
		t.Logf("cryo recover: %s", strings.TrimSpace(rec))
		harness.WantIn(t, rec, "recovered: checked")
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
