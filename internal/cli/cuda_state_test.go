package cli

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/lock"
)

// A checkpoint in progress is named before anything else and never gets
// the `cuda resume` remedy; a suspended process without one does.
func TestStateNote(t *testing.T) {
	for _, c := range []struct {
		l            cudaStateLine
		want, absent string
	}{
		{cudaStateLine{PID: 7, State: "checkpointed", Operation: "checkpoint", OperationPID: 9}, "checkpoint of it is in progress (cryo pid 9)", "cuda resume"},
		{cudaStateLine{PID: 7, State: "frozen", Frozen: true, Operation: "checkpoint", OperationPID: 9}, "is frozen: a checkpoint", "cuda resume"},
		{cudaStateLine{PID: 7, State: "frozen", Frozen: true}, "remedy: resume the container", "cuda resume"},
		{cudaStateLine{PID: 7, State: "locked", Operation: "cuda suspend", OperationPID: 9}, "held by `cryo cuda suspend`", "cuda resume 7"},
		{cudaStateLine{PID: 7, State: "checkpointed"}, "`cryo recover 7`", "checkpoint of"},
	} {
		got := stateNote(c.l)
		if !strings.Contains(got, c.want) || strings.Contains(got, c.absent) {
			t.Errorf("%+v: %q, want %q without %q", c.l, got, c.want, c.absent)
		}
	}
	if got := stateNote(cudaStateLine{PID: 7, State: "running"}); got != "" {
		t.Errorf("running: %q", got)
	}
}

// A pid's own lock is found, a container's by the cgroup, a free one not.
func TestLockOf(t *testing.T) {
	self := os.Getpid()
	locks := []lock.Info{{Key: "pid-1", Held: true, Op: "checkpoint"}, {Key: "pid-" + strconv.Itoa(self), Op: "checkpoint"}}
	if _, ok := lockOf(self, locks); ok {
		t.Fatal("a free lock counted")
	}
	locks[1].Held = true
	if l, ok := lockOf(self, locks); !ok || l.Key != "pid-"+strconv.Itoa(self) {
		t.Fatalf("own lock: %+v %v", l, ok)
	}
	if _, ok := lockOf(self, []lock.Info{{Key: "id-nosuchcontainer", Held: true, Target: "container nosuchcontainer"}}); ok {
		t.Fatal("a container this process is not in")
	}
}
