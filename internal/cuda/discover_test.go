package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	d := newDriver()
	a, plain := startApp(t), plainProcess(t)
	procs, skipped, err := d.Find(context.Background(), []int{a.PID, plain, a.PID})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Process{{PID: a.PID, State: StateRunning}}; !reflect.DeepEqual(procs, want) {
		t.Fatalf("found %+v, want %+v", procs, want)
	}
	if len(skipped) != 1 || skipped[0].PID != plain || !strings.Contains(skipped[0].Reason, "no CUDA driver mapped") {
		t.Fatalf("skipped %+v, want pid %d with no CUDA driver mapped", skipped, plain)
	}
}

func TestFindDeadPID(t *testing.T) {
	pid := deadPID(t)
	_, _, err := newDriver().Find(context.Background(), []int{pid})
	if !errors.Is(err, ErrNoProcess) {
		t.Fatalf("got %v, want ErrNoProcess", err)
	}
	mustContain(t, err, fmt.Sprint(pid))
}

// FindLive skips a pid that has exited, so a container's short-lived
// children do not fail its checkpoint, and fails only when all are gone.
func TestFindLiveSkipsExited(t *testing.T) {
	d := newDriver()
	a, dead := startApp(t), deadPID(t)
	procs, skipped, err := d.FindLive(context.Background(), []int{a.PID, dead})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Process{{PID: a.PID, State: StateRunning}}; !reflect.DeepEqual(procs, want) {
		t.Fatalf("found %+v, want %+v", procs, want)
	}
	if want := []Skipped{{PID: dead, Reason: reasonExited}}; !reflect.DeepEqual(skipped, want) {
		t.Fatalf("skipped %+v, want %+v", skipped, want)
	}
	_, _, err = d.FindLive(context.Background(), []int{dead})
	if !errors.Is(err, ErrNoProcess) {
		t.Fatalf("all gone: got %v, want ErrNoProcess", err)
	}
	mustContain(t, err, fmt.Sprint(dead))
}

func TestPIDsOfCgroup(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cgroup.procs", "30\n10\n")
	write("child/cgroup.procs", "20\n10\n")
	write("child/grandchild/cgroup.procs", "")
	write("child/tasks", "99\n") // v1 threads: not processes
	got, err := PIDsOfCgroup(dir)
	if err != nil || !reflect.DeepEqual(got, []int{10, 20, 30}) {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := PIDsOfCgroup(filepath.Join(dir, "nope")); err == nil {
		t.Fatal("a missing cgroup must fail")
	}
}

func TestPIDsOfOwnCgroup(t *testing.T) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[0] != "0" {
			continue
		}
		for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			pids, err := PIDsOfCgroup(filepath.Join(root, f[2]))
			if err != nil {
				continue
			}
			for _, p := range pids {
				if p == os.Getpid() {
					return
				}
			}
			t.Fatalf("own pid %d not among %v", os.Getpid(), pids)
		}
	}
	t.Skip("no cgroup v2 hierarchy found")
}
