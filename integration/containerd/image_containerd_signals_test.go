package containerd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cli/ctrd"
	"golang.org/x/sys/unix"
)

// ctrdSigCase is one signal delivered with cryo held before one step.
type ctrdSigCase struct {
	step  string
	sig   syscall.Signal
	group bool // to cryo's whole process group, not to cryo alone
}

// TestImageContainerdRestoreSignalSweep: SIGINT to cryo's group before
// every step of the restore's table (ctrd.RestoreSteps), and, sampled
// (cryo takes the three catchable signals alike, and the steps before
// the container make nothing a SIGKILL could leave), SIGTERM and SIGHUP to
// the group and SIGKILL to cryo alone and to its group at the steps that
// leave something in containerd. One containerd version: the steps are
// cryo's, the same on both. About 15 s.
func TestImageContainerdRestoreSignalSweep(t *testing.T) {
	base := filepath.Join(t.TempDir(), "restore")
	n := &harness.CtrdNode{Daemon: harness.StartDaemon(t, harness.CtrdVersions[1]), ImgNode: harness.NewNode(t, []string{"CRYO_RESTORE_DIR=" + base})}
	n.ImportTestImage()
	app := harness.UniqueID("app")
	n.RunApp(app)
	ckpt, tick := n.TaskCheckpoint(app, "--exit")
	n.WaitStopped(app)
	ref := "localhost/ckpt/ctrd-sig:v1"
	n.Cryo(t, "image", "build", "--containerd", ckpt, ref)

	var cases []ctrdSigCase
	for _, s := range ctrd.RestoreSteps() {
		cases = append(cases, ctrdSigCase{s, syscall.SIGINT, true})
	}
	cases = append(cases,
		ctrdSigCase{ctrd.StepContainer, syscall.SIGTERM, true},
		ctrdSigCase{ctrd.StepTask, syscall.SIGHUP, true},
		ctrdSigCase{ctrd.StepContent, syscall.SIGKILL, false},
		ctrdSigCase{ctrd.StepTask, syscall.SIGKILL, false},
		ctrdSigCase{ctrd.StepContainer, syscall.SIGKILL, true},
		ctrdSigCase{ctrd.StepStart, syscall.SIGKILL, true})
	for _, c := range cases {
		to := "cryo"
		if c.group {
			to = "group"
		}
		t.Run(c.step+"/"+unix.SignalName(c.sig)+"-"+to, func(t *testing.T) {
			name := harness.UniqueID("sig")
			t.Cleanup(func() { n.Remove(name) })
			args := n.WithAt([]string{"image", "restore", "--containerd", "--name", name,
				"--log", filepath.Join(t.TempDir(), "out.log"), "--gpus", harness.StandInNode(t, 0), ref})
			code, out := ctrdSignalAt(t, n, c, args)
			t.Logf("exit %d:\n%s", code, out)
			switch {
			case c.sig == syscall.SIGKILL:
				// The same command, run again, restores; what the killed
				// one left (its container, task, lease, work directory)
				// goes first.
				out := harness.Run(t, harness.ImgTimeout, n.ImgNode.Env, harness.CryoBin(t, "cryo"), args...)
				harness.WantIn(t, out, "restored container "+name)
				if steps := ctrd.RestoreSteps(); slices.Index(steps, c.step) > slices.Index(steps, ctrd.StepContainer) {
					harness.WantIn(t, out, "removed container "+name+", left by a restore whose cryo")
				}
				ctrdRunsOn(t, n, name, args, tick)
				noCtrdLeftovers(t, n, "")
				harness.WantEmpty(t, base, "the restore run again")
			case c.step == ctrd.StepStart:
				if code != 0 {
					t.Fatalf("exit %d after %s at the start, want 0 (restored):\n%s", code, unix.SignalName(c.sig), out)
				}
				harness.WantIn(t, out, "restored container "+name, unix.SignalName(c.sig)+" came once the command could no longer be undone: it completed")
				ctrdRunsOn(t, n, name, args, tick)
				harness.WantEmpty(t, base, "the completed restore")
			default:
				if code != 128+int(c.sig) {
					t.Errorf("exit %d after %s before %s, want %d", code, unix.SignalName(c.sig), c.step, 128+int(c.sig))
				}
				harness.WantIn(t, out, "restore of container "+name+" failed at step "+c.step,
					"restore interrupted: interrupted by "+unix.SignalName(c.sig), "nothing was restored, and nothing of it is left in containerd",
					"the checkpoint was not changed and is whole: run `cryo "+strings.Join(args, " ")+"` to restore it again")
				noCtrdLeftovers(t, n, name)
				harness.WantEmpty(t, base, "the interrupted restore")
			}
		})
	}
}

// ctrdSignalAt runs cryo with args, holds it before c.step, delivers
// c.sig and returns cryo's exit status and output.
func ctrdSignalAt(t *testing.T, n *harness.CtrdNode, c ctrdSigCase, args []string) (int, string) {
	hold := filepath.Join(t.TempDir(), "hold")
	g := harness.StartGroupCryo(t, harness.FailpointBin(t, "cryo"), append(n.ImgNode.Env, "CRYO_TEST_HOLD=ctrd-restore/"+c.step+":"+hold), args...)
	harness.WaitHold(t, hold, "cryo to reach step "+c.step)
	switch {
	case c.group:
		g.SignalGroup(c.sig)
	default:
		g.Cmd.Process.Signal(c.sig)
	}
	if c.sig != syscall.SIGKILL {
		harness.WaitFor(t, 10*time.Second, "cryo to take the signal", func() bool { return strings.Contains(g.Out.String(), "received: stopping") })
	}
	os.Remove(hold)
	return g.Wait(t), g.Out.String()
}

// ctrdRunsOn: the restored task runs, goes on from the checkpoint's tick,
// carries no mark of a restore under way, and is removed.
func ctrdRunsOn(t *testing.T, n *harness.CtrdNode, name string, args []string, tick int) {
	t.Helper()
	log := args[slices.Index(args, "--log")+1]
	n.WaitTicksIn(log, 3)
	if first := harness.CtrdTicks(t, log)[0]; first <= tick {
		t.Fatalf("restored app printed tick %d first, want just after %d", first, tick)
	}
	if st := n.TaskStatus(name); st != client.Running {
		t.Fatalf("restored task is %s", st)
	}
	ctx := harness.NamespacedCtx()
	ctr, err := n.Client.LoadContainer(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if labels, _ := ctr.Labels(ctx); labels[ctrd.OwnerLabel] != "" {
		t.Errorf("the restored container still carries %s=%s", ctrd.OwnerLabel, labels[ctrd.OwnerLabel])
	}
	n.Remove(name)
}

// noCtrdLeftovers: containerd holds no container name (if given) and no
// lease of a restore.
func noCtrdLeftovers(t *testing.T, n *harness.CtrdNode, name string) {
	t.Helper()
	ctx := harness.NamespacedCtx()
	if name != "" {
		if _, err := n.Client.LoadContainer(ctx, name); !errdefs.IsNotFound(err) {
			t.Errorf("container %s is left in containerd (%v)", name, err)
		}
	}
	ls, err := n.Client.LeasesService().List(ctx, `labels."`+ctrd.OwnerLabel+`"`)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		t.Errorf("lease %s of a restore is left in containerd: %v", l.ID, l.Labels)
	}
}
