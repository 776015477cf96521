package integration

// The checks `cryo checkpoint` and `cryo restore` make before touching
// anything, through the CLI as users run it.

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPrecheckRefusals(t *testing.T) {
	requireRoot(t)
	t.Run("TerminalWithoutShellJob", func(t *testing.T) {
		p := startOnPty(t, "bash", "-c", `n=0; while :; do echo tick $n; n=$((n+1)); read -t 0.2 l; done`)
		waitFor(t, 10*time.Second, "ticks", func() bool { return len(p.ticks()) >= 2 })
		pid := strconv.Itoa(p.cmd.Process.Pid)
		out := bareCryoFails(t, nil, "checkpoint", "--pid", pid, "--dir", filepath.Join(t.TempDir(), "img"))
		wantIn(t, out, "failed at step prepare: process tree attached to a terminal: pid "+pid+" (bash) has its stdin on the terminal /dev/pts/",
			"nothing was checkpointed, the processes were not touched; remedy: add --shell-job (and give it at restore too)")
		if strings.Count(out, "remedy:") != 1 {
			t.Errorf("want one remedy:\n%s", out)
		}
		n := len(p.ticks())
		waitFor(t, 5*time.Second, "ticks after the refusal", func() bool { return len(p.ticks()) > n })
	})
	t.Run("PIDInUse", func(t *testing.T) {
		p := bareStartCounter(t)
		img := filepath.Join(t.TempDir(), "img")
		bareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img, "--leave-running")
		out := bareCryoFails(t, nil, "restore", "--dir", img)
		wantIn(t, out, "restore of checkpoint "+img+" failed at step prepare: pid of the checkpoint in use: pid "+strconv.Itoa(p.pid)+" of the checkpoint is held by sh (pid "+strconv.Itoa(p.pid)+")",
			"nothing was restored; remedy: stop sh (pid "+strconv.Itoa(p.pid)+")")
		if strings.Contains(out, "restoring with CRIU") {
			t.Errorf("CRIU ran despite the pid in use:\n%s", out)
		}
	})
	t.Run("PIDInContainer", func(t *testing.T) {
		cmd := exec.Command("unshare", "--mount", "--pid", "--fork", "sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		var pid int
		waitFor(t, 5*time.Second, "sleep in its namespaces", func() bool {
			out, _ := exec.Command("pgrep", "-P", strconv.Itoa(cmd.Process.Pid)).Output()
			pid, _ = strconv.Atoi(strings.TrimSpace(string(out)))
			return pid > 0
		})
		out := bareCryoFails(t, nil, "checkpoint", "--pid", strconv.Itoa(pid), "--dir", filepath.Join(t.TempDir(), "img"))
		wantIn(t, out, "process in a container: pid "+strconv.Itoa(pid)+" (sleep) is in a container",
			"remedy: checkpoint the container through its runtime with cryo: `podman container checkpoint NAME` (runtime cryo-runc) or `ctr task checkpoint ID` (runtime io.containerd.cryo.v2)")
	})
}
