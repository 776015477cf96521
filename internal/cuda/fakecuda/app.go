package fakecuda

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"
)

// App is a running fakecuda-app, read line by line: its last tick and
// whether its device memory ever failed its check (sum=BAD). Tests of any
// package use it as their CUDA workload.
type App struct {
	PID  int
	tick atomic.Int64
	bad  atomic.Bool
}

// StartApp starts p's fakecuda-app with args (tick ms, MiB) and waits for
// its first tick, so that its CUDA state exists; it is killed at the end
// of the test.
func StartApp(t testing.TB, p Paths, args ...string) *App {
	t.Helper()
	cmd := exec.Command(p.App, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+p.Dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &App{PID: cmd.Process.Pid}
	done := make(chan struct{})
	go a.read(out, done)
	t.Cleanup(func() { cmd.Process.Kill(); <-done; cmd.Wait() })
	a.WaitTicks(t, 1)
	return a
}

func (a *App) read(out io.Reader, done chan struct{}) {
	defer close(done)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var n int64
		var state, sum string
		fmt.Sscanf(sc.Text(), "tick %d state=%s sum=%s", &n, &state, &sum)
		if sum != "OK" {
			a.bad.Store(true)
		}
		a.tick.Store(n)
	}
}

// WaitTicks waits until the app has ticked n more times with its device
// memory intact.
func (a *App) WaitTicks(t testing.TB, n int64) {
	t.Helper()
	want := a.tick.Load() + n
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if a.bad.Load() {
			t.Fatalf("pid %d: device memory pattern broken (sum=BAD)", a.PID)
		}
		if a.tick.Load() >= want {
			return
		}
	}
	t.Fatalf("pid %d: stuck at tick %d, want %d", a.PID, a.tick.Load(), want)
}

// AssertStalled checks that the app does not tick for a while (it is
// suspended).
func (a *App) AssertStalled(t testing.TB) {
	t.Helper()
	before := a.tick.Load()
	time.Sleep(80 * time.Millisecond)
	if now := a.tick.Load(); now != before {
		t.Fatalf("pid %d ticked %d→%d while suspended", a.PID, before, now)
	}
}

// Fault arms the fault file of op for pid in the fault directory dir (see
// the README's fault injection), removed at the end of the test.
func Fault(t testing.TB, dir, op string, pid int, text string) {
	t.Helper()
	path := fmt.Sprintf("%s/%s.%d", dir, op, pid)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
}
