package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"golang.org/x/sys/unix"
)

// TestRestoreSignalSweep: every step of a bare restore (read from the
// restore's tables) × SIGINT to the group, SIGKILL to cryo and SIGKILL to
// its whole group, and SIGTERM at CRIU's restore alone (cryo treats the
// three catchable signals alike; the checkpoint sweep covers each at every
// step). One checkpoint serves
// every case: each case ends with the workload killed, so that the next
// restore of the same, untouched checkpoint proves it is still whole.
// About 15 s here.
func TestRestoreSignalSweep(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0", "CRYO_LOCK_DIR="+t.TempDir())
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	// CRIU checks the size of the files the tree had open: the output the
	// workload writes in one case is cut back for the next one's restore.
	out := filepath.Join(p.Dir, "out")
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range orchestrate.RestoreSteps(false) {
		ways := []harness.StopBy{harness.ByINT, harness.ByKill, harness.ByKillGroup}
		if step == orchestrate.StepRestore {
			ways = append(ways, harness.ByTERM)
		}
		for _, by := range ways {
			t.Run(string(step)+"/"+by.String(), func(t *testing.T) {
				t.Cleanup(func() { killDumped(t, p); os.Truncate(out, st.Size()) })
				restoreSweepOne(t, env, p, img, string(step), by)
			})
		}
	}
	bareRestoreVerified(t, env, p, img)
}

// restoreSweepOne holds `cryo restore` before step, signals it, and checks
// what it left.
func restoreSweepOne(t *testing.T, env []string, p *harness.BareProc, img, step string, by harness.StopBy) {
	hold := filepath.Join(t.TempDir(), "hold")
	g := harness.StartGroupCryo(t, harness.FailpointBin(t, "cryo"), append(env, "CRYO_TEST_HOLD=restore/"+step+":"+hold), "restore", "--dir", img)
	harness.WaitHold(t, hold, "cryo to reach restore step "+step)
	sig := by.Sig
	by.Send(g)
	if !by.Killed() {
		harness.WaitFor(t, 10*time.Second, "cryo to take the signal", func() bool {
			return strings.Contains(g.Out.String(), "received: stopping")
		})
	}
	os.Remove(hold)
	code := g.Wait(t)
	out := g.Out.String()
	t.Logf("exit %d:\n%s", code, out)
	switch {
	case sig == syscall.SIGKILL && step == string(orchestrate.StepResume):
		// CRIU's restore is done: the tree is there, held with CUDA
		// checkpointed, and recover is the one way back.
		harness.AwaitHeld(t, p.PID)
		harness.WantIn(t, harness.BareCryo(t, env, "ps"), "run cryo recover "+strconv.Itoa(p.PID))
		harness.WantIn(t, harness.BareCryo(t, env, "recover", strconv.Itoa(p.PID)), "recovered: checked")
		runsIntact(t, env, p, out)
	case sig == syscall.SIGKILL:
		nothingRestored(t, p, img, out)
	case step == string(orchestrate.StepResume):
		// The CUDA resume is not cut short: the restore completes, checked.
		if code != 0 {
			t.Fatalf("exit %d after %s before the CUDA resume, want 0 (restored):\n%s", code, unix.SignalName(sig), out)
		}
		runsIntact(t, env, p, out)
		harness.WantIn(t, out, unix.SignalName(sig)+" came once the command could no longer be undone: it completed")
	default:
		if code != 128+int(sig) {
			t.Errorf("exit %d after %s before %s, want %d:\n%s", code, unix.SignalName(sig), step, 128+int(sig), out)
		}
		nothingRestored(t, p, img, out)
		harness.WantIn(t, out, "interrupted by "+unix.SignalName(sig), "nothing was restored",
			"the checkpoint was not changed and is whole: run `cryo restore --dir "+img+"` to restore it again")
	}
}

// nothingRestored: no process of the checkpoint, and no CRIU reading its
// images, is left.
func nothingRestored(t *testing.T, p *harness.BareProc, img, out string) {
	t.Helper()
	harness.WaitFor(t, 10*time.Second, "no process of the checkpoint to be left", func() bool { return !procfs.Exists(p.PID) })
	harness.WaitFor(t, 10*time.Second, "no CRIU to hold the checkpoint open", func() bool { return len(harness.HoldersOf("criu", img)) == 0 })
}
