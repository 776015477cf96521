package cli

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

func TestPrecheckRefusals(t *testing.T) {
	harness.RequireRoot(t)
	t.Run("TerminalWithoutShellJob", func(t *testing.T) {
		p := startOnPty(t, "bash", "-c", `n=0; while :; do echo tick $n; n=$((n+1)); read -t 0.2 l; done`)
		harness.WaitFor(t, 10*time.Second, "ticks", func() bool { return len(p.Ticks()) >= 2 })
		pid := strconv.Itoa(p.cmd.Process.Pid)
		out := harness.BareCryoFails(t, nil, "checkpoint", "--pid", pid, "--dir", filepath.Join(t.TempDir(), "img"))
		harness.WantIn(t, out, "failed at step prepare: process tree attached to a terminal: pid "+pid+" (bash) has its stdin on the terminal /dev/pts/",
			"nothing was checkpointed, the processes were not touched; remedy: add --shell-job (and give it at restore too)")
		if strings.Count(out, "remedy:") != 1 {
			t.Errorf("want one remedy:\n%s", out)
		}
		n := len(p.Ticks())
		harness.WaitFor(t, 5*time.Second, "ticks after the refusal", func() bool { return len(p.Ticks()) > n })
	})
	t.Run("PIDInUse", func(t *testing.T) {
		p := bareStartCounter(t)
		img := filepath.Join(t.TempDir(), "img")
		harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--leave-running")
		out := harness.BareCryoFails(t, nil, "restore", "--dir", img)
		harness.WantIn(t, out, "restore of checkpoint "+img+" failed at step prepare: pid of the checkpoint in use: pid "+strconv.Itoa(p.PID)+" of the checkpoint is held by sh (pid "+strconv.Itoa(p.PID)+")",
			"nothing was restored; remedy: stop sh (pid "+strconv.Itoa(p.PID)+")")
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
		harness.WaitFor(t, 5*time.Second, "sleep in its namespaces", func() bool {
			out, _ := exec.Command("pgrep", "-P", strconv.Itoa(cmd.Process.Pid)).Output()
			pid, _ = strconv.Atoi(strings.TrimSpace(string(out)))
			return pid > 0
		})
		out := harness.BareCryoFails(t, nil, "checkpoint", "--pid", strconv.Itoa(pid), "--dir", filepath.Join(t.TempDir(), "img"))
		harness.WantIn(t, out, "process in a container: pid "+strconv.Itoa(pid)+" (sleep) is in a container",
			"remedy: checkpoint the container through its runtime with cryo: `podman container checkpoint NAME` (runtime cryo-runc) or `ctr task checkpoint ID` (runtime io.containerd.cryo.v2)")
	})
}
