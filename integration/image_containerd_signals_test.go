package integration

// The restore sweep (restore_signals_test.go) for `cryo image restore
// --containerd`: cryo fills containerd (a lease and its blobs, a
// container, a task) and the shim runs CRIU when the task starts. An
// interrupt before the start removes all of it, and the checkpoint, which
// a restore only reads, restores again by the command cryo prints; one at
// the start lets the restore complete; a SIGKILL leaves records that the
// next run of the same command removes before it restores.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/cli/ctrd"
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
	n := &ctrdNode{daemon: startDaemon(t, ctrdVersions[1]), imgNode: newNode(t, []string{"CRYO_RESTORE_DIR=" + base})}
	n.importTestImage()
	app := uniqueID("app")
	n.runApp(app)
	ckpt, tick := n.taskCheckpoint(app, "--exit")
	n.waitStopped(app)
	ref := "localhost/ckpt/ctrd-sig:v1"
	n.cryo(t, "image", "build", "--containerd", ckpt, ref)

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
			name := uniqueID("sig")
			t.Cleanup(func() { n.remove(name) })
			args := n.withAt([]string{"image", "restore", "--containerd", "--name", name,
				"--log", filepath.Join(t.TempDir(), "out.log"), "--gpus", standInNode(t, 0), ref})
			code, out := ctrdSignalAt(t, n, c, args)
			t.Logf("exit %d:\n%s", code, out)
			switch {
			case c.sig == syscall.SIGKILL:
				// The same command, run again, restores; what the killed
				// one left (its container, task, lease, work directory)
				// goes first.
				out := run(t, imgTimeout, n.imgNode.env, cryoBin(t, "cryo"), args...)
				wantIn(t, out, "restored container "+name)
				if steps := ctrd.RestoreSteps(); slices.Index(steps, c.step) > slices.Index(steps, ctrd.StepContainer) {
					wantIn(t, out, "removed container "+name+", left by a restore whose cryo")
				}
				ctrdRunsOn(t, n, name, args, tick)
				noCtrdLeftovers(t, n, "")
				wantEmpty(t, base, "the restore run again")
			case c.step == ctrd.StepStart:
				if code != 0 {
					t.Fatalf("exit %d after %s at the start, want 0 (restored):\n%s", code, unix.SignalName(c.sig), out)
				}
				wantIn(t, out, "restored container "+name, unix.SignalName(c.sig)+" came once the command could no longer be undone: it completed")
				ctrdRunsOn(t, n, name, args, tick)
				wantEmpty(t, base, "the completed restore")
			default:
				if code != 128+int(c.sig) {
					t.Errorf("exit %d after %s before %s, want %d", code, unix.SignalName(c.sig), c.step, 128+int(c.sig))
				}
				wantIn(t, out, "restore of container "+name+" failed at step "+c.step,
					"restore interrupted: interrupted by "+unix.SignalName(c.sig), "nothing was restored, and nothing of it is left in containerd",
					"the checkpoint was not changed and is whole: run `cryo "+strings.Join(args, " ")+"` to restore it again")
				noCtrdLeftovers(t, n, name)
				wantEmpty(t, base, "the interrupted restore")
			}
		})
	}
}

// ctrdSignalAt runs cryo with args, holds it before c.step, delivers
// c.sig and returns cryo's exit status and output.
func ctrdSignalAt(t *testing.T, n *ctrdNode, c ctrdSigCase, args []string) (int, string) {
	hold := filepath.Join(t.TempDir(), "hold")
	g := startGroupCryo(t, failpointBin(t, "cryo"), append(n.imgNode.env, "CRYO_TEST_HOLD=ctrd-restore/"+c.step+":"+hold), args...)
	waitHold(t, hold, "cryo to reach step "+c.step)
	switch {
	case c.group:
		g.signalGroup(c.sig)
	default:
		g.cmd.Process.Signal(c.sig)
	}
	if c.sig != syscall.SIGKILL {
		waitFor(t, 10*time.Second, "cryo to take the signal", func() bool { return strings.Contains(g.out.String(), "received: stopping") })
	}
	os.Remove(hold)
	return g.wait(t), g.out.String()
}

// ctrdRunsOn: the restored task runs, goes on from the checkpoint's tick,
// carries no mark of a restore under way, and is removed.
func ctrdRunsOn(t *testing.T, n *ctrdNode, name string, args []string, tick int) {
	t.Helper()
	log := args[slices.Index(args, "--log")+1]
	n.waitTicksIn(log, 3)
	if first := ctrdTicks(t, log)[0]; first <= tick {
		t.Fatalf("restored app printed tick %d first, want just after %d", first, tick)
	}
	if st := n.taskStatus(name); st != client.Running {
		t.Fatalf("restored task is %s", st)
	}
	ctx := namespacedCtx()
	ctr, err := n.client.LoadContainer(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if labels, _ := ctr.Labels(ctx); labels[ctrd.OwnerLabel] != "" {
		t.Errorf("the restored container still carries %s=%s", ctrd.OwnerLabel, labels[ctrd.OwnerLabel])
	}
	n.remove(name)
}

// noCtrdLeftovers: containerd holds no container name (if given) and no
// lease of a restore.
func noCtrdLeftovers(t *testing.T, n *ctrdNode, name string) {
	t.Helper()
	ctx := namespacedCtx()
	if name != "" {
		if _, err := n.client.LoadContainer(ctx, name); !errdefs.IsNotFound(err) {
			t.Errorf("container %s is left in containerd (%v)", name, err)
		}
	}
	ls, err := n.client.LeasesService().List(ctx, `labels."`+ctrd.OwnerLabel+`"`)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		t.Errorf("lease %s of a restore is left in containerd: %v", l.ID, l.Labels)
	}
}
