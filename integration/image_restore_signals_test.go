package integration

// The restore sweep (restore_signals_test.go) for `cryo image restore` of
// a bare checkpoint from the local store: the image is unpacked into a
// private work directory and restored from there, and an interrupt must
// leave neither a process nor that directory (the process's memory,
// decrypted) behind.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// TestImageRestoreSignalSweep: `cryo image restore REF` held before the
// verify and the CRIU restore steps with a SIGINT to its group, before the
// restore with a SIGKILL, and before the CUDA resume with a SIGINT. The
// first three leave no process and, interrupted, no work directory (the
// killed one's is removed by the next restore); the message names the
// command to run again. The last completes, the work directory removed.
// The steps between are the ones TestRestoreSignalSweep covers for the
// directory; this samples them for the image route. About 15 s.
func TestImageRestoreSignalSweep(t *testing.T) {
	requireRoot(t)
	env := append(fakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	base := filepath.Join(t.TempDir(), "restore")
	n := newNode(t, append(env, "CRYO_RESTORE_DIR="+base))
	app, dir, tick := checkpointApp(t, env)
	ref := "localhost/ckpt/sigsweep:v1"
	n.cryo(t, "image", "build", dir, ref)
	for _, c := range []struct {
		step string
		sig  syscall.Signal
	}{{"verify", syscall.SIGINT}, {"restore", syscall.SIGINT}, {"restore", syscall.SIGKILL}, {"resume", syscall.SIGINT}} {
		t.Run(c.step+"/"+unix.SignalName(c.sig), func(t *testing.T) {
			hold := filepath.Join(t.TempDir(), "hold")
			g := startGroupCryo(t, failpointBin(t, "cryo"), append(n.env, "CRYO_TEST_HOLD=restore/"+c.step+":"+hold), "image", "restore", ref)
			waitHold(t, hold, "cryo to reach restore step "+c.step)
			if c.sig == syscall.SIGKILL {
				g.cmd.Process.Signal(c.sig)
			} else {
				g.signalGroup(c.sig)
				waitFor(t, 10*time.Second, "cryo to take the signal", func() bool { return strings.Contains(g.out.String(), "received: stopping") })
			}
			os.Remove(hold)
			code, out := g.wait(t), g.out.String()
			t.Logf("exit %d:\n%s", code, out)
			switch {
			case c.step == "resume":
				if code != 0 {
					t.Fatalf("exit %d after SIGINT past CRIU's restore, want 0:\n%s", code, out)
				}
				app.waitTick(t, tick+3)
				wantEmpty(t, base, "the completed restore")
			case c.sig == syscall.SIGKILL:
				if procfs.Exists(app.pid) {
					t.Fatalf("a process of the checkpoint runs after cryo was killed before CRIU's restore")
				}
			default:
				if code != 130 {
					t.Errorf("exit %d after SIGINT before %s, want 130", code, c.step)
				}
				if procfs.Exists(app.pid) {
					t.Fatalf("a process of the checkpoint is left after the interrupted restore")
				}
				wantEmpty(t, base, "the interrupted restore")
				wantIn(t, out, "restore interrupted", "run `cryo image restore "+ref+"` to restore it again")
			}
		})
	}
}
