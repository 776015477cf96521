package cuda

import (
	"context"
	"errors"
	"fmt"
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
