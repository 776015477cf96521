package lock

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseLocksLine(t *testing.T) {
	k, pid, ok := parseLocksLine("3: FLOCK  ADVISORY  WRITE 4242 00:1a:1234 0 EOF")
	if !ok || pid != 4242 || k != (inodeKey{0, 0x1a, 1234}) {
		t.Fatalf("got %+v %d %v", k, pid, ok)
	}
	for _, bad := range []string{"3: -> FLOCK  ADVISORY  WRITE 4243 00:1a:1234 0 EOF", "", "1: FLOCK ADVISORY WRITE 1 nodev 0 EOF"} {
		if _, _, ok := parseLocksLine(bad); ok {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// A lock this process holds reads as held with its holder's line; a lock
// released reads as free; neither read takes the lock.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	l, err := Target(dir, "checkpoint", "abc")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AddPIDs([]int{77}); err != nil {
		t.Fatal(err)
	}
	locks, err := Read(dir)
	if err != nil || len(locks) != 2 {
		t.Fatalf("Read: %+v, %v", locks, err)
	}
	for _, li := range locks {
		if !li.Held || li.HolderPID != os.Getpid() || li.Op != "checkpoint" || li.Target != "container abc" || li.Container() != "abc" {
			t.Fatalf("held lock read as %+v", li)
		}
	}
	if locks[1].Key != "pid-77" || locks[1].PID() != 77 || locks[0].PID() != 0 {
		t.Fatalf("keys %q %q", locks[0].Key, locks[1].Key)
	}
	l.Release()
	locks, _ = Read(dir)
	if len(locks) != 2 || locks[0].Held || locks[1].Held {
		t.Fatalf("released locks read as %+v", locks)
	}
	if none, err := Read(filepath.Join(dir, "missing")); err != nil || len(none) != 0 {
		t.Fatalf("missing dir: %+v, %v", none, err)
	}
}
