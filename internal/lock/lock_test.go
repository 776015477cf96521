package lock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLockTargetBusy(t *testing.T) {
	dir := t.TempDir()
	l, err := Target(dir, "checkpoint", "abc")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Target(dir, "restore", "abc")
	var be *BusyError
	if !errors.Is(err, ErrBusy) || !errors.As(err, &be) || be.PID != os.Getpid() {
		t.Fatalf("want a BusyError naming this process, got %v", err)
	}
	want := "a checkpoint of container abc is in progress (pid " + strconv.Itoa(os.Getpid()) + " of cryo)"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("%q lacks %q", err, want)
	}
	l.Release()
	l2, err := Target(dir, "restore", "abc")
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	l2.Release()
}

// TestLockPIDsCollide: a bare checkpoint of a container's pid and a
// checkpoint of the container collide on the pid.
func TestLockPIDsCollide(t *testing.T) {
	dir := t.TempDir()
	a, err := Target(dir, "checkpoint", "pid 42")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	if err := a.AddPIDs([]int{42, 43}); err != nil {
		t.Fatal(err)
	}
	if err := a.AddPIDs([]int{42}); err != nil {
		t.Fatalf("a key already held must be taken again: %v", err)
	}
	b, err := Target(dir, "checkpoint", "ctr")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	err = b.AddPIDs([]int{7, 43})
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "checkpoint of pid 42 is in progress") {
		t.Fatalf("want busy naming pid 42's checkpoint, got %v", err)
	}
}

// TestForReusesHeld: a run handed the lock its caller holds uses it, and
// its release leaves it held.
func TestForReusesHeld(t *testing.T) {
	dir := t.TempDir()
	l, err := Target(dir, "restore", "r1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	got, release, err := For(l, dir, "restore", "r1")
	if err != nil || got != l {
		t.Fatalf("For under a held lock: %v", err)
	}
	release() // a no-op: the caller's lock stays
	if _, err := Target(dir, "checkpoint", "r1"); !errors.Is(err, ErrBusy) {
		t.Fatalf("the lock was dropped by a nested release: %v", err)
	}
}

// TestLockDiesWithHolder: a killed holder leaves no stale lock.
func TestLockDiesWithHolder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName("id-dead"))
	os.WriteFile(path, []byte("1 checkpoint of container dead\n"), 0o600)
	cmd := exec.Command("sh", "-c", `exec 9<>"$0" && flock -x 9 && exec sleep 60`, path)
	if err := cmd.Start(); err != nil {
		t.Skipf("no flock(1): %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := Target(dir, "checkpoint", "dead")
		if errors.Is(err, ErrBusy) {
			break
		}
		if err == nil {
			l.Release()
		}
		if time.Now().After(deadline) {
			t.Fatal("flock(1) never took the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := Target(dir, "checkpoint", "dead")
	if err != nil {
		t.Fatalf("lock of a killed holder still held: %v", err)
	}
	l.Release()
}

// A holder's line read while a new holder rewrites it over a longer old
// one: only the first line names the holder.
func TestReadHolderFirstLine(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for text, want := range map[string]string{
		"505 pause of container cc\ncc\n":  "pause of container cc",
		"505 checkpoint of container cc\n": "checkpoint of container cc",
		"505 restore of container cc":      "restore of container cc",
	} {
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(text), 0); err != nil {
			t.Fatal(err)
		}
		if pid, what := readHolder(f); pid != 505 || what != want {
			t.Errorf("readHolder(%q) = %d %q, want 505 %q", text, pid, what, want)
		}
	}
}

func TestLockFileName(t *testing.T) {
	if got := FileName("id-abc_1.2"); got != "id-abc_1.2.lock" {
		t.Fatal(got)
	}
	a, b := FileName("id-checkpoint /tmp/x"), FileName("id-checkpoint /tmp/y")
	if a == b || strings.ContainsAny(a, "/ ") {
		t.Fatalf("%q %q", a, b)
	}
}
