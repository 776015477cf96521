package containerd

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cli/ctrd"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// TestImageContainerdRestoreSignalMidCall: SIGINT to cryo's group while
// its task create waits on the shim, held before the restore's first
// check. cryo ends at step task with nothing restored and nothing left in
// containerd (read back), the shim goes, and the same command restores.
// About 10 s.
func TestImageContainerdRestoreSignalMidCall(t *testing.T) {
	setting := filepath.Join(t.TempDir(), "hold-setting")
	base := filepath.Join(t.TempDir(), "restore")
	d := harness.NewDaemon(t, harness.CtrdVersions[1], false)
	d.EnvExtra = []string{"PATH=" + filepath.Dir(harness.FailpointBin(t, "containerd-shim-cryo-v2")) + ":" + harness.BinDir() + ":" + d.Bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CRYO_TEST_HOLD=@" + setting}
	d.Start()
	n := &harness.CtrdNode{Daemon: d, ImgNode: harness.NewNode(t, []string{"CRYO_RESTORE_DIR=" + base})}
	n.ImportTestImage()
	app := harness.UniqueID("app")
	n.RunApp(app)
	ckpt, tick := n.TaskCheckpoint(app, "--exit")
	n.WaitStopped(app)
	ref := "localhost/ckpt/ctrd-midcall:v1"
	n.Cryo(t, "image", "build", "--containerd", ckpt, ref)

	name := harness.UniqueID("mid")
	t.Cleanup(func() { n.Remove(name) })
	args := n.WithAt([]string{"image", "restore", "--containerd", "--name", name,
		"--log", filepath.Join(t.TempDir(), "out.log"), "--gpus", harness.StandInNode(t, 0), ref})
	hold := filepath.Join(filepath.Dir(setting), "hold")
	first := orchestrate.RestoreSteps(true)[0]
	if err := os.WriteFile(setting, []byte("restore/"+string(first)+":"+hold), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(setting); os.Remove(hold) })
	g := harness.StartGroupCryo(t, harness.CryoBin(t, "cryo"), n.ImgNode.Env, args...)
	harness.WaitHold(t, hold, "the shim to reach restore step "+string(first)+", inside cryo's task create")
	shim := d.ShimPid(name)
	g.SignalGroup(syscall.SIGINT)
	// cryo ends without the shim's answer; the hold goes only if it
	// does not, so that the read-back ran while containerd's create was
	// still under way.
	done := make(chan int, 1)
	go func() { done <- g.Wait(t) }()
	var code int
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("cryo did not end within 30 s of SIGINT while containerd's create waited:\n%s", g.Out)
		os.Remove(hold)
		code = <-done
	}
	os.Remove(setting)
	os.Remove(hold)
	out := g.Out.String()
	t.Logf("exit %d:\n%s", code, out)
	if code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGINT))
	}
	harness.WantIn(t, out, "restore of container "+name+" failed at step "+ctrd.StepTask,
		"restore interrupted: interrupted by SIGINT", "nothing was restored, and nothing of it is left in containerd",
		"the checkpoint was not changed and is whole: run `cryo "+strings.Join(args, " ")+"` to restore it again")
	if strings.Contains(out, "read the shim's lines") {
		t.Errorf("the interrupt's report gives the cut call's own remedy, not the retry")
	}
	if strings.Contains(out, "restored container") {
		t.Errorf("cryo said it restored the container")
	}
	harness.WaitFor(t, 20*time.Second, "containerd to shut the held shim down", func() bool { return !procfs.Alive(shim) })
	if taskExists(d, name) {
		t.Errorf("a task of %s is left after its create was interrupted", name)
	}
	noCtrdLeftovers(t, n, name)
	harness.WantEmpty(t, base, "the interrupted restore")

	again := harness.Run(t, harness.ImgTimeout, n.ImgNode.Env, harness.CryoBin(t, "cryo"), args...)
	harness.WantIn(t, again, "restored container "+name)
	ctrdRunsOn(t, n, name, args, tick)
}
