package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/console"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// ptyRun is a command on a new pseudo-terminal, as a terminal emulator
// starts a shell: in its own session, with the terminal as its controlling
// terminal and as its stdin, stdout and stderr. Everything it prints is
// kept for the test.
type ptyRun struct {
	master console.Console
	cmd    *exec.Cmd
	out    testsupport.Buffer
}

func startOnPty(t *testing.T, name string, args ...string) *ptyRun {
	t.Helper()
	master, slavePath, err := console.NewPty()
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile(slavePath, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	p := &ptyRun{master: master, cmd: exec.Command(name, args...)}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Reaped at once when it exits (a dumped tree must free its pid), and
	// read all along so that a full terminal never blocks its writers.
	go p.cmd.Wait()
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			p.out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		master.Close()
	})
	return p
}

func (p *ptyRun) Output() string { return p.out.String() }

var tickLine = regexp.MustCompile(`tick (\d+)`)

// ticks are the tick numbers printed on the terminal, in order.
func (p *ptyRun) Ticks() []int {
	var n []int
	for _, m := range tickLine.FindAllStringSubmatch(p.Output(), -1) {
		i, _ := strconv.Atoi(m[1])
		n = append(n, i)
	}
	return n
}

// TestShellJobRestoreOntoTerminal checkpoints a tree that prints ticks on
// terminal 1 and answers what it reads there, restores it from a shell on
// terminal 2, and checks that the ticks go on there, from where they
// stopped, and that it reads terminal 2.
func TestShellJobRestoreOntoTerminal(t *testing.T) {
	harness.RequireRoot(t)
	// One process, with builtins only: a child (sleep) would outlive the
	// dump as a zombie in the job's process group and keep its pid taken.
	job := `n=0; while :; do echo tick $n; n=$((n+1)); if read -t 0.2 l; then echo "got $l"; fi; done`
	p1 := startOnPty(t, "bash", "-c", job)
	harness.WaitFor(t, 10*time.Second, "ticks on terminal 1", func() bool { return len(p1.Ticks()) >= 3 })
	pid := p1.cmd.Process.Pid
	img := filepath.Join(t.TempDir(), "img")

	out := harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(pid), "--dir", img, "--shell-job")
	t.Logf("checkpoint:\n%s", out)
	harness.WaitFor(t, 10*time.Second, "the dumped tree to be gone", func() bool { return syscall.Kill(pid, 0) != nil })
	before := p1.Ticks()
	last := before[len(before)-1]

	// As "criu restore --shell-job" does, cryo stays in the foreground of
	// terminal 2 while the job runs there, and exits with the job's status.
	p2 := startOnPty(t, "sh", "-c", harness.CryoBin(t, "cryo")+" restore --dir "+img+" --shell-job; echo restore-exit=$?; exec sleep 600")
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	harness.WaitFor(t, 30*time.Second, "ticks on terminal 2", func() bool { return len(p2.Ticks()) >= 3 })
	if !bytes.Contains([]byte(p2.Output()), []byte("runs on this terminal")) || bytes.Contains([]byte(p2.Output()), []byte("restore-exit=")) {
		t.Fatalf("cryo restore --shell-job does not wait for the job on terminal 2:\n%s", p2.Output())
	}
	after := p2.Ticks()
	if after[0] < last || after[0] > last+2 {
		t.Errorf("ticks on terminal 2 start at %d, want them to go on from %d (terminal 1 stopped there)", after[0], last)
	}
	if _, err := p2.master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, "the restored job to read terminal 2", func() bool {
		return bytes.Contains([]byte(p2.Output()), []byte("got hello"))
	})
	n1 := len(p1.Ticks())
	time.Sleep(time.Second)
	if len(p1.Ticks()) != n1 {
		t.Errorf("terminal 1 still gets ticks after the restore onto terminal 2")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	harness.WaitFor(t, 10*time.Second, "cryo to return with the job's status", func() bool {
		return bytes.Contains([]byte(p2.Output()), []byte("restore-exit=137"))
	})
}
