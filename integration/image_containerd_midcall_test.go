package integration

// A Ctrl-C that lands in the middle of a containerd call of `cryo image
// restore --containerd`, not between its steps: cryo waits in the task's
// create while the shim is held in its checks. containerd may finish
// what the call asked after cryo stopped waiting; cryo says that nothing
// of the restore is left in containerd only after it read containerd back.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	d := newDaemon(t, ctrdVersions[1], false)
	d.envExtra = []string{"PATH=" + filepath.Dir(failpointBin(t, "containerd-shim-cryo-v2")) + ":" + binDir() + ":" + d.bin + ":/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
		"CRYO_TEST_HOLD=@" + setting}
	d.start()
	n := &ctrdNode{daemon: d, imgNode: newNode(t, []string{"CRYO_RESTORE_DIR=" + base})}
	n.importTestImage()
	app := uniqueID("app")
	n.runApp(app)
	ckpt, tick := n.taskCheckpoint(app, "--exit")
	n.waitStopped(app)
	ref := "localhost/ckpt/ctrd-midcall:v1"
	n.cryo(t, "image", "build", "--containerd", ckpt, ref)

	name := uniqueID("mid")
	t.Cleanup(func() { n.remove(name) })
	args := n.withAt([]string{"image", "restore", "--containerd", "--name", name,
		"--log", filepath.Join(t.TempDir(), "out.log"), "--gpus", standInNode(t, 0), ref})
	hold := filepath.Join(filepath.Dir(setting), "hold")
	first := orchestrate.RestoreSteps(true)[0]
	if err := os.WriteFile(setting, []byte("restore/"+string(first)+":"+hold), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(setting); os.Remove(hold) })
	g := startGroupCryo(t, cryoBin(t, "cryo"), n.imgNode.env, args...)
	waitHold(t, hold, "the shim to reach restore step "+string(first)+", inside cryo's task create")
	shim := d.shimPid(name)
	g.signalGroup(syscall.SIGINT)
	// cryo ends without the shim's answer; the hold goes only if it
	// does not, so that the read-back ran while containerd's create was
	// still under way.
	done := make(chan int, 1)
	go func() { done <- g.wait(t) }()
	var code int
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("cryo did not end within 30 s of SIGINT while containerd's create waited:\n%s", g.out)
		os.Remove(hold)
		code = <-done
	}
	os.Remove(setting)
	os.Remove(hold)
	out := g.out.String()
	t.Logf("exit %d:\n%s", code, out)
	if code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGINT))
	}
	wantIn(t, out, "restore of container "+name+" failed at step "+ctrd.StepTask,
		"restore interrupted: interrupted by SIGINT", "nothing was restored, and nothing of it is left in containerd",
		"the checkpoint was not changed and is whole: run `cryo "+strings.Join(args, " ")+"` to restore it again")
	if strings.Contains(out, "read the shim's lines") {
		t.Errorf("the interrupt's report gives the cut call's own remedy, not the retry")
	}
	if strings.Contains(out, "restored container") {
		t.Errorf("cryo said it restored the container")
	}
	waitFor(t, 20*time.Second, "containerd to shut the held shim down", func() bool { return !procfs.Alive(shim) })
	if taskExists(d, name) {
		t.Errorf("a task of %s is left after its create was interrupted", name)
	}
	noCtrdLeftovers(t, n, name)
	wantEmpty(t, base, "the interrupted restore")

	again := run(t, imgTimeout, n.imgNode.env, cryoBin(t, "cryo"), args...)
	wantIn(t, again, "restored container "+name)
	ctrdRunsOn(t, n, name, args, tick)
}
