package integration

// The signal sweep of signals_test.go, for `cryo restore --dir`: a
// terminal's Ctrl-C (SIGINT to cryo's group), a supervisor's SIGTERM and a
// SIGKILL of cryo, before each step of the restore's own table. A restore
// that is interrupted leaves nothing half-restored: no stopped tree, no
// CRIU, the lock free, and the checkpoint as it was, restorable again by
// the command cryo prints; one killed after CRIU's restore leaves the tree
// held, and `cryo recover` lets it run on.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
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
	requireRoot(t)
	env := append(fakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0", "CRYO_LOCK_DIR="+t.TempDir())
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	killDumped(t, p)
	// CRIU checks the size of the files the tree had open: the output the
	// workload writes in one case is cut back for the next one's restore.
	out := filepath.Join(p.dir, "out")
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range orchestrate.RestoreSteps(false) {
		ways := []stopBy{byINT, byKill, byKillGroup}
		if step == orchestrate.StepRestore {
			ways = append(ways, byTERM)
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
func restoreSweepOne(t *testing.T, env []string, p *bareProc, img, step string, by stopBy) {
	hold := filepath.Join(t.TempDir(), "hold")
	g := startGroupCryo(t, failpointBin(t, "cryo"), append(env, "CRYO_TEST_HOLD=restore/"+step+":"+hold), "restore", "--dir", img)
	waitHold(t, hold, "cryo to reach restore step "+step)
	sig := by.sig
	by.send(g)
	if !by.killed() {
		waitFor(t, 10*time.Second, "cryo to take the signal", func() bool {
			return strings.Contains(g.out.String(), "received: stopping")
		})
	}
	os.Remove(hold)
	code := g.wait(t)
	out := g.out.String()
	t.Logf("exit %d:\n%s", code, out)
	switch {
	case sig == syscall.SIGKILL && step == string(orchestrate.StepResume):
		// CRIU's restore is done: the tree is there, held with CUDA
		// checkpointed, and recover is the one way back.
		awaitHeld(t, p.pid)
		wantIn(t, bareCryo(t, env, "ps"), "run cryo recover "+strconv.Itoa(p.pid))
		wantIn(t, bareCryo(t, env, "recover", strconv.Itoa(p.pid)), "recovered: checked")
		runsIntact(t, env, p, out)
	case sig == syscall.SIGKILL:
		nothingRestored(t, p, img, out)
	case step == string(orchestrate.StepResume):
		// The CUDA resume is not cut short: the restore completes, checked.
		if code != 0 {
			t.Fatalf("exit %d after %s before the CUDA resume, want 0 (restored):\n%s", code, unix.SignalName(sig), out)
		}
		runsIntact(t, env, p, out)
		wantIn(t, out, unix.SignalName(sig)+" came once the command could no longer be undone: it completed")
	default:
		if code != 128+int(sig) {
			t.Errorf("exit %d after %s before %s, want %d:\n%s", code, unix.SignalName(sig), step, 128+int(sig), out)
		}
		nothingRestored(t, p, img, out)
		wantIn(t, out, "interrupted by "+unix.SignalName(sig), "nothing was restored",
			"the checkpoint was not changed and is whole: run `cryo restore --dir "+img+"` to restore it again")
	}
}

// nothingRestored: no process of the checkpoint, and no CRIU reading its
// images, is left.
func nothingRestored(t *testing.T, p *bareProc, img, out string) {
	t.Helper()
	waitFor(t, 10*time.Second, "no process of the checkpoint to be left", func() bool { return !procfs.Exists(p.pid) })
	waitFor(t, 10*time.Second, "no CRIU to hold the checkpoint open", func() bool { return len(holdersOf("criu", img)) == 0 })
}

// holdersOf lists the processes running prog that hold a file under dir
// open: on a machine shared with other runs, the CRIU of this test.
func holdersOf(prog, dir string) []int {
	var pids []int
	for _, pid := range pidsOf(prog) {
		fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, dir) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
