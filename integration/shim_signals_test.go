package integration

// The signal sweep for the shim: a Ctrl-C on `ctr task checkpoint` is a
// signal to ctr's group, and the shim's CRIU is in none of ctr's: it runs
// under the shim, which containerd started in a session of its own. What
// reaches the shim is ctr's request going away.

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	client "github.com/containerd/containerd/v2/client"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// TestShimCtrGroupInterrupt: SIGINT to `ctr task checkpoint`'s group while
// the shim's CRIU holds the container in its post-dump phase. ctr dies of
// it; the shim's CRIU does not (its pid is alive after the signal, in a
// session that is not ctr's), ends its dump, and the container runs on,
// ticking with its device memory verified and CUDA running, once the task
// that containerd left paused is resumed. About 15 s.
func TestShimCtrGroupInterrupt(t *testing.T) {
	hold, holdFile := criuHoldEnv(t, "post-dump")
	d := newDaemon(t, ctrdVersions[1], false)
	d.envExtra = append(d.envExtra, hold...)
	d.start()
	d.importTestImage()
	d.runApp("sig")
	args := []string{"--address", d.socket, "--namespace", testNamespace, "task", "checkpoint", "sig"}
	g := startGroupCryo(t, filepath.Join(d.bin, "ctr"), d.env(), args...)
	waitHold(t, holdFile, "the shim's CRIU to reach post-dump")
	criuPID := holdScriptParent(t, holdFile)
	if sid, _ := unix.Getsid(criuPID); sid == g.cmd.Process.Pid {
		t.Fatalf("the shim's CRIU (pid %d) is in ctr's session", criuPID)
	}
	g.signalGroup(syscall.SIGINT)
	code := g.wait(t)
	time.Sleep(300 * time.Millisecond)
	if !procfs.Alive(criuPID) {
		t.Fatalf("the shim's CRIU (pid %d) died of the signal to ctr's group", criuPID)
	}
	t.Logf("ctr exited %d after SIGINT to its group; the shim's CRIU (pid %d) lives on:\n%s", code, criuPID, g.out)
	os.Remove(holdFile)
	waitFor(t, time.Minute, "the shim's CRIU to end its dump", func() bool { return !procfs.Alive(criuPID) })
	// containerd paused the task before its Checkpoint call (the GPU-free
	// pause: CUDA suspended, then frozen) and resumes it when the call
	// returns, on ctr's request context: ctr gone, that resume fails, and
	// the task stays paused. Nothing is lost: the pause's own resume
	// brings it back, CUDA first.
	// While the shim checkpoints, the task reads Running (the checkpoint
	// thaws it to dump it); the shim's answer leaves it paused again, as
	// containerd's pause had it. Wait for that answer, not for a status.
	if !waitUntil(30*time.Second, func() bool { return d.taskStatus("sig") == client.Paused }) {
		t.Logf("the task never read paused after the checkpoint: %s", d.taskStatus("sig"))
	} else {
		t.Logf("containerd left the task paused: `ctr task resume`")
		d.ctr("task", "resume", "sig")
	}
	d.assertRunsOn("sig")
	pid := d.taskPid("sig")
	waitFor(t, 20*time.Second, "CUDA running in the container", func() bool {
		pg, err := fakecuda.ReadPage(pid)
		return err == nil && pg.State == 0
	})
}

// holdScriptParent is the pid of the CRIU whose action script (criuHoldEnv)
// created holdFile: the parent of the script's shell.
func holdScriptParent(t *testing.T, holdFile string) int {
	t.Helper()
	script := filepath.Join(filepath.Dir(holdFile), "hold.sh")
	for _, pid := range pidsOf("sh", script) {
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
