package podman

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// The restore's arguments: Podman's global options first, then the
// restore's own, only those given; the global options are not changed by
// building them, since every call of the restore reuses them.
func TestRestoreArgs(t *testing.T) {
	global := make([]string, 2, 8)
	copy(global, []string{"--root", "/r"})
	r := Restore{Global: global, Name: "app", Pod: "p", Publish: []string{"80:80", "443:443"}, TCPEstablished: true}
	want := []string{"--root", "/r", "container", "restore", "--import", "/t.tar", "--name", "app", "--pod", "p",
		"--publish", "80:80", "--publish", "443:443", "--tcp-established"}
	if got := r.Args("/t.tar"); !slices.Equal(got, want) {
		t.Errorf("args %q, want %q", got, want)
	}
	if got := (Restore{}).Args("/t.tar"); !slices.Equal(got, []string{"container", "restore", "--import", "/t.tar"}) {
		t.Errorf("bare args %q", got)
	}
	if spare := global[:cap(global)]; spare[2] != "" {
		t.Errorf("building the args wrote into the global options' array: %q", spare)
	}
}

// A container that does not exist leaves nothing to clean up, and says so.
func TestRemoveLeftoverNone(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("no podman")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("cryo-leftover-none-%d", os.Getpid())
	if got, want := RemoveLeftover(ctx, nil, name), "no container "+name+" was left behind"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got := RemoveLeftover(ctx, nil, ""); got != "no container name to clean up" {
		t.Errorf("no name: %q", got)
	}
}
