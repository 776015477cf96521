package harness

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// CRIUHoldEnv makes CRIU hold in its action-script phase phase until the
// file it creates is removed: through $CRIU_CONFIG_FILE, which CRIU reads
// in RPC mode too, so that the shipped binary is held mid-dump. It returns
// the environment and the hold file.
func CRIUHoldEnv(t *testing.T, phase string) ([]string, string) {
	t.Helper()
	dir := t.TempDir()
	hold := filepath.Join(dir, "held")
	script := filepath.Join(dir, "hold.sh")
	WriteFile(t, script, "#!/bin/sh\n[ \"$CRTOOLS_SCRIPT_ACTION\" = "+phase+" ] || exit 0\n"+
		": > "+hold+"\nn=0\nwhile [ -e "+hold+" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "criu.conf")
	WriteFile(t, conf, "action-script "+script+"\n")
	return []string{"CRIU_CONFIG_FILE=" + conf}, hold
}

// GroupCryo is a cryo command started as the leader of a process group of
// its own, as a shell starts a job.
type GroupCryo struct {
	Cmd *exec.Cmd
	Out *strings.Builder
}

func StartGroupCryo(t *testing.T, bin string, env []string, args ...string) *GroupCryo {
	t.Helper()
	g := &GroupCryo{Cmd: exec.Command(bin, args...), Out: &strings.Builder{}}
	g.Cmd.Env = append(os.Environ(), env...)
	g.Cmd.Stdout, g.Cmd.Stderr = g.Out, g.Out
	g.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-g.Cmd.Process.Pid, syscall.SIGKILL); g.Cmd.Wait() })
	return g
}

// signalGroup signals the whole group, as a terminal's Ctrl-C does.
func (g *GroupCryo) SignalGroup(sig syscall.Signal) { syscall.Kill(-g.Cmd.Process.Pid, sig) }

// StopBy is one way a sweep stops cryo: a signal to its process group (a
// terminal's Ctrl-C, a supervisor's SIGTERM, or `kill -9 -PGID` taking
// cryo and everything in its group), or SIGKILL to cryo alone (an OOM
// kill). CRIU, runc and the driver helper run in groups of their own:
// a kill of cryo's group leaves them to end what they do.
type StopBy struct {
	Sig   syscall.Signal
	Group bool
}

// The ways every sweep goes through: the three signals cryo catches, to
// its group, and SIGKILL, to cryo alone and to its group.
var (
	ByINT       = StopBy{syscall.SIGINT, true}
	ByTERM      = StopBy{syscall.SIGTERM, true}
	ByHUP       = StopBy{syscall.SIGHUP, true}
	ByKill      = StopBy{syscall.SIGKILL, false}
	ByKillGroup = StopBy{syscall.SIGKILL, true}
)

func (s StopBy) String() string {
	if s.Sig == syscall.SIGKILL && s.Group {
		return "SIGKILL-group"
	}
	return unix.SignalName(s.Sig)
}

// killed: cryo had no say (SIGKILL).
func (s StopBy) Killed() bool { return s.Sig == syscall.SIGKILL }

// send stops g.
func (s StopBy) Send(g *GroupCryo) {
	if s.Group {
		g.SignalGroup(s.Sig)
		return
	}
	g.Cmd.Process.Signal(s.Sig)
}

// wait returns cryo's exit status; a run past two minutes fails the test.
func (g *GroupCryo) Wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- g.Cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("cryo: %v\n%s", err, g.Out)
		}
		return 0
	case <-time.After(2 * time.Minute):
		t.Fatalf("cryo did not end within two minutes:\n%s", g.Out)
	}
	return -1
}

// WaitHold waits for a hold file to appear.
func WaitHold(t *testing.T, hold, what string) {
	t.Helper()
	WaitFor(t, BareTimeout, what, func() bool {
		_, err := os.Stat(hold)
		return err == nil
	})
}

// DumpedBytes is the size of the page images CRIU has written into dir.
func DumpedBytes(dir string) int64 {
	var n int64
	m, _ := filepath.Glob(filepath.Join(dir, "pages-*.img"))
	for _, f := range m {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}
