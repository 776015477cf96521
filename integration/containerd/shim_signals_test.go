package containerd

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"golang.org/x/sys/unix"
)

// TestShimCtrGroupInterrupt: SIGINT to `ctr task checkpoint`'s group while
// the shim's CRIU holds the container in its post-dump phase. ctr dies of
// it; the shim's CRIU does not (its pid is alive after the signal, in a
// session that is not ctr's), ends its dump, and the container runs on,
// ticking with its device memory verified and CUDA running, once the task
// that containerd left paused is resumed. About 15 s.
func TestShimCtrGroupInterrupt(t *testing.T) {
	hold, holdFile := harness.CRIUHoldEnv(t, "post-dump")
	d := harness.NewDaemon(t, harness.CtrdVersions[1], false)
	d.EnvExtra = append(d.EnvExtra, hold...)
	d.Start()
	d.ImportTestImage()
	d.RunApp("sig")
	args := []string{"--address", d.Socket, "--namespace", harness.TestNamespace, "task", "checkpoint", "sig"}
	g := harness.StartGroupCryo(t, filepath.Join(d.Bin, "ctr"), d.Env(), args...)
	harness.WaitHold(t, holdFile, "the shim's CRIU to reach post-dump")
	criuPID := holdScriptParent(t, holdFile)
	if sid, _ := unix.Getsid(criuPID); sid == g.Cmd.Process.Pid {
		t.Fatalf("the shim's CRIU (pid %d) is in ctr's session", criuPID)
	}
	g.SignalGroup(syscall.SIGINT)
	code := g.Wait(t)
	time.Sleep(300 * time.Millisecond)
	if !procfs.Alive(criuPID) {
		t.Fatalf("the shim's CRIU (pid %d) died of the signal to ctr's group", criuPID)
	}
	t.Logf("ctr exited %d after SIGINT to its group; the shim's CRIU (pid %d) lives on:\n%s", code, criuPID, g.Out)
	os.Remove(holdFile)
	harness.WaitFor(t, time.Minute, "the shim's CRIU to end its dump", func() bool { return !procfs.Alive(criuPID) })
	// containerd paused the task before its Checkpoint call (the GPU-free
	// pause: CUDA suspended, then frozen) and resumes it when the call
	// returns, on ctr's request context: ctr gone, that resume fails, and
	// the task stays paused. Nothing is lost: the pause's own resume
	// brings it back, CUDA first.
	// While the shim checkpoints, the task reads Running (the checkpoint
	// thaws it to dump it); the shim's answer leaves it paused again, as
	// containerd's pause had it. Wait for that answer, not for a status.
	if !waitUntil(30*time.Second, func() bool { return d.TaskStatus("sig") == client.Paused }) {
		t.Logf("the task never read paused after the checkpoint: %s", d.TaskStatus("sig"))
	} else {
		t.Logf("containerd left the task paused: `ctr task resume`")
		d.Ctr("task", "resume", "sig")
	}
	d.AssertRunsOn("sig")
	pid := d.TaskPid("sig")
	harness.WaitFor(t, 20*time.Second, "CUDA running in the container", func() bool {
		pg, err := fakecuda.ReadPage(pid)
		return err == nil && pg.State == 0
	})
}

// holdScriptParent is the pid of the CRIU whose action script (CRIUHoldEnv)
// created holdFile: the parent of the script's shell.
func holdScriptParent(t *testing.T, holdFile string) int {
	t.Helper()
	script := filepath.Join(filepath.Dir(holdFile), "hold.sh")
	for _, pid := range harness.PidsOf("sh", script) {
		if v, ok := procfs.StatusField(pid, "PPid"); ok {
			if ppid, err := strconv.Atoi(v); err == nil && procfs.Comm(ppid) == "criu" {
				return ppid
			}
		}
	}
	t.Fatalf("no CRIU runs %s", script)
	return 0
}

// waitUntil polls cond every 100 ms until it holds or d passes.
func waitUntil(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
