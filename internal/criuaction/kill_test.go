package criuaction

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestExitingSeesAKilledChild(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if exiting(pid) {
		t.Fatalf("a sleeping child counts as exiting")
	}
	if err := killRestored([]int{pid}); err != nil { // the test binary's parent is no CRIU: only the tree goes
		t.Fatal(err)
	}
	if !exiting(pid) {
		t.Errorf("a killed child (a zombie until reaped) does not count as exiting")
	}
	cmd.Wait()
	if !exiting(pid) {
		t.Errorf("a reaped child does not count as exiting")
	}
}

func TestRemoveYard(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it mounts")
	}
	yard := filepath.Join(t.TempDir(), ".criu.cgyard.test")
	for _, d := range []string{yard, yard + "/pids"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("none", d, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(yard+"/pids", 0o700)
	}
	t.Cleanup(func() { unix.Unmount(yard+"/pids", unix.MNT_DETACH); unix.Unmount(yard, unix.MNT_DETACH) })
	if err := removeYard(yard); err != nil {
		t.Fatal(err)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), yard) {
		t.Errorf("the yard is still mounted")
	}
	if _, err := os.Stat(yard); !os.IsNotExist(err) {
		t.Errorf("the yard is still there: %v", err)
	}
}
