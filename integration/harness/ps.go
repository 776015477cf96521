package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// freezer is a cgroup of the freezer (v1) or of cgroup v2, holding one
// process; the test's cleanup thaws it, moves the process back and
// removes the cgroup.
type freezer struct {
	Dir string
	v1  bool
}

func NewFreezer(t *testing.T, name string, pid int) *freezer {
	t.Helper()
	fz := &freezer{}
	var back string
	cg, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) == 3 && parts[1] == "freezer":
			fz.v1, back = true, filepath.Join("/sys/fs/cgroup/freezer", parts[2])
		case len(parts) == 3 && parts[0] == "0" && back == "":
			back = filepath.Join("/sys/fs/cgroup", parts[2])
		}
	}
	root := "/sys/fs/cgroup"
	if fz.v1 {
		root = "/sys/fs/cgroup/freezer"
	} else if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		t.Fatalf("no cgroup freezer: neither %s/freezer (v1) nor cgroup v2 at %s", root, root)
	}
	fz.Dir = filepath.Join(root, name)
	if err := os.Mkdir(fz.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fz.Set(t, false)
		os.WriteFile(filepath.Join(back, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		for i := 0; i < 50 && os.Remove(fz.Dir) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(fz.Dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move pid %d into %s: %v", pid, fz.Dir, err)
	}
	return fz
}

// set freezes or thaws the cgroup and waits until the kernel says it is
// done.
func (fz *freezer) Set(t *testing.T, frozen bool) {
	file, value, done := "cgroup.freeze", "0", "frozen 0"
	if fz.v1 {
		file, value, done = "freezer.state", "THAWED", "THAWED"
	}
	if frozen && fz.v1 {
		value, done = "FROZEN", "FROZEN"
	} else if frozen {
		value, done = "1", "frozen 1"
	}
	if err := os.WriteFile(filepath.Join(fz.Dir, file), []byte(value), 0o644); err != nil {
		t.Errorf("%s %s: %v", file, value, err)
		return
	}
	state := filepath.Join(fz.Dir, "cgroup.events")
	if fz.v1 {
		state = filepath.Join(fz.Dir, "freezer.state")
	}
	WaitFor(t, 5*time.Second, "the cgroup to be "+done, func() bool {
		b, _ := os.ReadFile(state)
		return strings.Contains(string(b), done)
	})
}
