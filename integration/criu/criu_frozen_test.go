package criu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// taskState is the state letter of /proc/PID/stat ("" when it is gone).
func taskState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if err != nil || i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// TestCRIUFrozenStopped: a process held in a group stop (SIGSTOP) in a
// cgroup that is frozen before CRIU starts reports state D, not T. cryo's
// CRIU still finds it stopped (its wchan is do_signal_stop), seizes by
// interrupt and dumps it, where stock CRIU's seize waits in the kernel until
// the cgroup is thawed (a watchdog thaws it after a minute, so a hanging
// CRIU fails the test instead of holding it). Restored, the process is
// still stopped, and runs on SIGCONT.
func TestCRIUFrozenStopped(t *testing.T) {
	harness.RequireRoot(t)
	criu := harness.PatchedCRIU(t)
	p := harness.StartBare(t, nil, nil, "sleep 1000 </dev/null")
	fz := harness.NewFreezer(t, "cryo-frozen-"+strconv.Itoa(p.PID), p.PID)
	if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, "the process to stop", func() bool { return taskState(p.PID) == "T" })
	fz.Set(t, true)
	if s := taskState(p.PID); s == "T" {
		t.Logf("a stopped task of a frozen cgroup reports T on this kernel")
	}

	var thawed atomic.Bool
	watchdog := time.AfterFunc(time.Minute, func() {
		thawed.Store(true)
		fz.ThawNow()
	})
	img := t.TempDir()
	out, err := harness.RunErr(3*time.Minute, nil, criu, "dump", "-t", strconv.Itoa(p.PID), "-D", img, "-o", "dump.log", "-v4",
		"--freeze-cgroup", fz.Dir)
	watchdog.Stop()
	log, _ := os.ReadFile(filepath.Join(img, "dump.log"))
	if thawed.Load() {
		t.Fatalf("criu dump of a stopped task in a frozen cgroup hung until the cgroup was thawed:\n%s", harness.Tail(string(log), 20))
	}
	if err != nil {
		t.Fatalf("criu dump: %v\n%s\n%s", err, out, harness.Tail(string(log), 30))
	}
	harness.WantIn(t, string(log), "cryo: a task of "+fz.Dir+" is stopped; seizing by interrupt, not by the freezer")
	harness.WaitFor(t, 2*time.Minute, "the dumped process to be reaped", func() bool { return taskState(p.PID) == "" })

	harness.CRIURestore(t, criu, img, nil)
	if s := taskState(p.PID); s != "T" {
		t.Fatalf("restored process: state %q, want T (stopped, as it was dumped)", s)
	}
	if err := syscall.Kill(p.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 10*time.Second, "the restored process to run on SIGCONT", func() bool { return taskState(p.PID) == "S" })
}
