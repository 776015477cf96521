package harness

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
)

// with returns the daemon bound to a subtest's testing.T.
func (d *Daemon) With(t testing.TB) *Daemon {
	c := *d
	c.T = t
	return &c
}

// assertRunsOn checks that a task is running (not paused) and ticking, its
// CUDA state running.
func (d *Daemon) AssertRunsOn(id string) {
	d.T.Helper()
	WaitFor(d.T, 10*time.Second, id+" running", func() bool { return d.TaskStatus(id) == client.Running })
	d.WaitTicks(id, 3)
}

// AssertContinues checks that a restored log starts after the tick seen
// before the checkpoint: the counter carried on instead of starting over.
func AssertContinues(t testing.TB, path string, before int) {
	t.Helper()
	ts := CtrdTicks(t, path)
	if len(ts) == 0 {
		t.Fatalf("%s: no ticks", path)
	}
	if ts[0] <= before || ts[0] > before+100 {
		t.Fatalf("%s: first tick after restore %d, want just after %d (the counter must carry on)", path, ts[0], before)
	}
	t.Logf("%s: ticks carried on: %d before the checkpoint, %d..%d after", filepath.Base(path), before, ts[0], ts[len(ts)-1])
}

// checkStepOrder checks the shim's log: containerd's pause before the
// checkpoint suspended CUDA and then froze the task (the GPU-free pause);
// the checkpoint thawed it, found CUDA suspended and dumped it as it was;
// containerd's resume after the checkpoint thawed the task, then resumed
// CUDA.
func (d *Daemon) CheckStepOrder(id string) {
	d.T.Helper()
	var steps []string
	for _, line := range strings.Split(d.Log(), "\n") {
		if !strings.Contains(line, "cryo: step done") || !strings.Contains(line, "id="+id+" ") {
			continue
		}
		if i := strings.Index(line, "step="); i >= 0 {
			steps = append(steps, strings.Fields(line[i+5:])[0])
		}
	}
	want := []string{"find", "inventory", "suspend", "record", "freeze", // pause
		"thaw", "find", "inventory", "manifest", "dump", "digests", // checkpoint
		"thaw", "resume"} // resume
	if strings.Join(steps, " ") != strings.Join(want, " ") {
		d.T.Fatalf("checkpoint steps of %s: %v, want %v", id, steps, want)
	}
}
