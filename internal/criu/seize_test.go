package criu

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
)

// The shim's reaper can take the check's exit status ("wait: no child
// processes"): the patched CRIU's printed verdict still counts, and an
// unpatched CRIU's refusal still refuses.
func TestSeizeVerdict(t *testing.T) {
	reaped := &exec.ExitError{}
	echild := errors.Join(syscall.ECHILD)
	if err := seizeVerdict([]byte("cryo_seize_stopped is supported\n"), echild); err != nil {
		t.Fatalf("a supported feature whose exit status was reaped elsewhere: %v", err)
	}
	if err := seizeVerdict([]byte("Error (criu/cr-check.c:1901): Unknown feature cryo_seize_stopped\n"), reaped); err == nil {
		t.Fatal("an unknown feature was taken as supported")
	}
	if err := seizeVerdict(nil, echild); !errors.Is(err, syscall.ECHILD) {
		t.Fatalf("no verdict and no status: %v", err)
	}
}
