package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"golang.org/x/sys/unix"
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
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	base := filepath.Join(t.TempDir(), "restore")
	n := harness.NewNode(t, append(env, "CRYO_RESTORE_DIR="+base))
	app, dir, tick := harness.CheckpointApp(t, env)
	ref := "localhost/ckpt/sigsweep:v1"
	n.Cryo(t, "image", "build", dir, ref)
	for _, c := range []struct {
		step string
		sig  syscall.Signal
	}{{"verify", syscall.SIGINT}, {"restore", syscall.SIGINT}, {"restore", syscall.SIGKILL}, {"resume", syscall.SIGINT}} {
		t.Run(c.step+"/"+unix.SignalName(c.sig), func(t *testing.T) {
			hold := filepath.Join(t.TempDir(), "hold")
			g := harness.StartGroupCryo(t, harness.FailpointBin(t, "cryo"), append(n.Env, "CRYO_TEST_HOLD=restore/"+c.step+":"+hold), "image", "restore", ref)
			harness.WaitHold(t, hold, "cryo to reach restore step "+c.step)
			if c.sig == syscall.SIGKILL {
				g.Cmd.Process.Signal(c.sig)
			} else {
				g.SignalGroup(c.sig)
				harness.WaitFor(t, 10*time.Second, "cryo to take the signal", func() bool { return strings.Contains(g.Out.String(), "received: stopping") })
			}
			os.Remove(hold)
			code, out := g.Wait(t), g.Out.String()
			t.Logf("exit %d:\n%s", code, out)
			switch {
			case c.step == "resume":
				if code != 0 {
					t.Fatalf("exit %d after SIGINT past CRIU's restore, want 0:\n%s", code, out)
				}
				app.WaitTick(t, tick+3)
				harness.WantEmpty(t, base, "the completed restore")
			case c.sig == syscall.SIGKILL:
				if procfs.Exists(app.PID) {
					t.Fatalf("a process of the checkpoint runs after cryo was killed before CRIU's restore")
				}
			default:
				if code != 130 {
					t.Errorf("exit %d after SIGINT before %s, want 130", code, c.step)
				}
				if procfs.Exists(app.PID) {
					t.Fatalf("a process of the checkpoint is left after the interrupted restore")
				}
				harness.WantEmpty(t, base, "the interrupted restore")
				harness.WantIn(t, out, "restore interrupted", "run `cryo image restore "+ref+"` to restore it again")
			}
		})
	}
}
