package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

const BareTimeout = 2 * time.Minute

// BareProc is a process tree started detached (setsid -f, so init reaps it
// and its pid is free again after a dump), stdio on /dev/null and a file:
// CRIU restores both as they were.
type BareProc struct {
	Dir string // owned by the process: its pid file and output
	PID int
}

// StartBare runs script with sh in its own session. extra files are passed
// as fds 3, 4, …; env is added to the environment.
func StartBare(t *testing.T, env []string, extra []*os.File, script string) *BareProc {
	t.Helper()
	p := &BareProc{Dir: t.TempDir()}
	out, err := os.Create(filepath.Join(p.Dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("setsid", "-f", "sh", "-c", "echo $$ > pid; exec "+script)
	cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = p.Dir, out, out, extra
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	WaitFor(t, 10*time.Second, "pid file", func() bool {
		b, err := os.ReadFile(filepath.Join(p.Dir, "pid"))
		p.PID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && p.PID > 0
	})
	// Registered after TempDir, so it runs first: the restored process
	// keeps the same pid, so killing it by pid covers the restored one too.
	// setsid made it the leader of its own process group, which CRIU
	// restores too: the group goes with it (a pipeline's other processes,
	// `cat /dev/zero | tail`, would spin on otherwise).
	t.Cleanup(func() { syscall.Kill(-p.PID, syscall.SIGKILL); syscall.Kill(p.PID, syscall.SIGKILL) })
	return p
}

func (p *BareProc) Alive() bool { return procfs.Alive(p.PID) }

func (p *BareProc) Output() string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "out"))
	return string(b)
}

// LastTick is the number of the last tick fakecuda-app printed, or -1.
func (p *BareProc) LastTick(t *testing.T) int {
	t.Helper()
	return LastOf(FakeTicks(t, "fakecuda-app", p.Output()))
}

// WaitTicks waits until the app has printed tick n or later.
func (p *BareProc) WaitTicks(t *testing.T, n int) {
	t.Helper()
	WaitFor(t, 20*time.Second, "tick "+strconv.Itoa(n), func() bool { return p.LastTick(t) >= n })
}

func BareStartFakeApp(t *testing.T, env []string, extra []*os.File) *BareProc {
	libDir := filepath.Dir(FakeFile(t, "libcuda.so.1"))
	app := FakeFile(t, "fakecuda-app")
	p := StartBare(t, append(env, "LD_LIBRARY_PATH="+libDir), extra, app+" 50")
	p.WaitTicks(t, 3)
	return p
}

func BareCryo(t *testing.T, env []string, args ...string) string {
	t.Helper()
	return Run(t, BareTimeout, env, CryoBin(t, "cryo"), args...)
}

func BareCryoFails(t *testing.T, env []string, args ...string) string {
	t.Helper()
	return CryoFails(t, BareTimeout, env, args...)
}

// BareRestoredPID runs `cryo restore` and returns the pid it prints.
func BareRestoredPID(t *testing.T, env []string, img string) int {
	t.Helper()
	out := Run(t, BareTimeout, env, CryoBin(t, "cryo"), "restore", "--dir", img)
	for _, line := range strings.Split(out, "\n") {
		if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil {
			return n
		}
	}
	t.Fatalf("cryo restore printed no pid:\n%s", out)
	return 0
}
