package orchestrate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
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
func TestReadLocks(t *testing.T) {
	dir := t.TempDir()
	o := New(WithConfig(config.Config{LockDir: dir}))
	_, l, err := o.LockTarget(context.Background(), "checkpoint", "abc")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AddPIDs([]int{77}); err != nil {
		t.Fatal(err)
	}
	locks, err := ReadLocks(dir)
	if err != nil || len(locks) != 2 {
		t.Fatalf("ReadLocks: %+v, %v", locks, err)
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
	locks, _ = ReadLocks(dir)
	if len(locks) != 2 || locks[0].Held || locks[1].Held {
		t.Fatalf("released locks read as %+v", locks)
	}
	if none, err := ReadLocks(filepath.Join(dir, "missing")); err != nil || len(none) != 0 {
		t.Fatalf("missing dir: %+v, %v", none, err)
	}
}

func TestReadPauses(t *testing.T) {
	dir := t.TempDir()
	o := New(WithConfig(config.Config{LockDir: dir}))
	if err := o.writePause(&pauseRecord{ID: "ctr", Processes: nil}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "paused-bad.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, err := ReadPauses(dir)
	if len(ps) != 1 || ps[0].ID != "ctr" || ps[0].Path != o.pausePath("ctr") {
		t.Fatalf("pauses %+v", ps)
	}
	if err == nil {
		t.Fatal("a damaged record is no error")
	}
}
