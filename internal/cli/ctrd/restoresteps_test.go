package ctrd

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// A restore's mark names its cryo by pid and start time: a live cryo's
// restore is not abandoned, a dead one's is, and so is one whose pid now
// names another process. A mark cryo did not write is never taken for an
// abandoned restore.
func TestOwnerGone(t *testing.T) {
	if ownerGone(ownerMark()) {
		t.Errorf("this process's own mark %q reads as gone", ownerMark())
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	if !ownerGone(strconv.Itoa(cmd.Process.Pid) + "/1") {
		t.Errorf("the mark of exited pid %d reads as alive", cmd.Process.Pid)
	}
	if !ownerGone(strconv.Itoa(os.Getpid()) + "/0") {
		t.Errorf("a mark with this pid and another start time reads as alive")
	}
	for _, m := range []string{"", "x", "12", "-1/5", "0/0"} {
		if ownerGone(m) {
			t.Errorf("mark %q (not cryo's) reads as gone", m)
		}
	}
}

// The table's steps are what the sweep holds before, the start last: it
// is the one step an interrupt does not stop.
func TestRestoreStepsEndWithStart(t *testing.T) {
	steps := RestoreSteps()
	if len(steps) == 0 || steps[len(steps)-1] != StepStart {
		t.Fatalf("RestoreSteps() = %v, want the start last", steps)
	}
}
