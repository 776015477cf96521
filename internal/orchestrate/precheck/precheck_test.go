package precheck

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/console"
	"github.com/cryo-gpu/cryo/internal/report"
)

// start runs sleep with attr and stdio, and ends it with the test.
func start(t *testing.T, attr *syscall.SysProcAttr, stdio *os.File, args ...string) int {
	t.Helper()
	if len(args) == 0 {
		args = []string{"sleep", "30"}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = attr
	if stdio != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio, stdio, stdio
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

func TestPIDsFree(t *testing.T) {
	self := os.Getpid()
	err := PIDsFree([]int{self})
	if !errors.Is(err, ErrPIDInUse) || IsUsage(err) {
		t.Fatalf("own pid: %v, want ErrPIDInUse (not a usage error)", err)
	}
	want := fmt.Sprintf("pid %d of the checkpoint is held by %s (pid %d); remedy: stop %s (pid %d)", self, comm(self), self, comm(self), self)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("message %q lacks %q", err, want)
	}
	var rm report.Remedied
	if !errors.As(err, &rm) || !strings.HasPrefix(rm.RemedyText(), fmt.Sprintf("stop %s (pid %d)", comm(self), self)) || rm.Error() != report.Render(rm.Cause(), rm.RemedyText()) {
		t.Errorf("the refusal's remedy is not a value: %v", rm)
	}
	if err := PIDsFree([]int{1 << 22}); err != nil { // above pid_max's ceiling
		t.Errorf("free pid refused: %v", err)
	}
}

func TestShellJob(t *testing.T) {
	leader := start(t, &syscall.SysProcAttr{Setsid: true}, nil)
	if err := ShellJob(leader, []int{leader}, false); err != nil {
		t.Errorf("session leader on no terminal refused: %v", err)
	}
	child := start(t, nil, nil) // in the test's session
	err := ShellJob(child, []int{child}, false)
	if !errors.Is(err, ErrShellJob) || !IsUsage(err) || !strings.Contains(err.Error(), "is not the leader of its session") ||
		!strings.HasSuffix(err.Error(), "; remedy: add --shell-job (and give it at restore too)") {
		t.Errorf("non-leader: %v", err)
	}
	if err := ShellJob(child, []int{child}, true); err != nil {
		t.Errorf("--shell-job given, still refused: %v", err)
	}

	master, slavePath, err := console.NewPty()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	slave, err := os.OpenFile(slavePath, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	onPty := start(t, &syscall.SysProcAttr{Setsid: true, Setctty: true}, slave)
	err = ShellJob(onPty, []int{onPty}, false)
	if !errors.Is(err, ErrShellJob) || !strings.Contains(err.Error(), "has its stdin on the terminal "+slavePath) {
		t.Errorf("tree on a terminal: %v", err)
	}
}

func TestHostProcess(t *testing.T) {
	if err := HostProcess(os.Getpid()); err != nil {
		t.Errorf("own pid: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("a new mount namespace needs root")
	}
	pid := start(t, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}, nil)
	err := HostProcess(pid)
	if !errors.Is(err, ErrInContainer) || !IsUsage(err) {
		t.Fatalf("process in its own mount namespace: %v", err)
	}
	wantIn(t, err.Error(), "pid "+strconv.Itoa(pid)+" (sleep) is in a container (its mnt namespace", "remedy: checkpoint the container through its runtime", "ctr task checkpoint")
}

func TestRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		if err := Root("checkpoint"); err != nil {
			t.Errorf("root refused: %v", err)
		}
	}
	e := &Error{Err: ErrNotRoot, Detail: "cryo checkpoint drives CRIU, which needs root (uid 1000)", Remedy: "run as root (sudo)"}
	if got, want := e.Error(), "not running as root: cryo checkpoint drives CRIU, which needs root (uid 1000); remedy: run as root (sudo)"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

func wantIn(t *testing.T, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%q lacks %q", s, w)
		}
	}
}
