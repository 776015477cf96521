package procfs

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// A running child is Alive and in our Tree; once it exits and until it is
// reaped it is a zombie: not Alive, but it still Exists (its pid is taken).
func TestAliveZombieGone(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !Alive(pid) || StartTime(pid) == "" {
		t.Fatalf("running child: Alive %v, start %q", Alive(pid), StartTime(pid))
	}
	tree, err := Tree(os.Getpid())
	if err != nil || !slices.Contains(tree, pid) {
		t.Fatalf("Tree(self) = %v, %v; want it to hold %d", tree, err, pid)
	}
	cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for State(pid) != "Z" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if Alive(pid) || !Exists(pid) {
		t.Fatalf("zombie: Alive %v, Exists %v; want false, true", Alive(pid), Exists(pid))
	}
	if WaitGone(pid, 50*time.Millisecond) {
		t.Fatal("WaitGone says an unreaped zombie is gone")
	}
	cmd.Wait()
	if !WaitGone(pid, time.Second) || Exists(pid) {
		t.Fatal("a reaped child is still there")
	}
	if _, err := Tree(pid); err == nil {
		t.Fatal("Tree of a gone pid succeeded")
	}
	if Alive(0) || Alive(-1) || Exists(0) {
		t.Fatal("pid 0 or -1 reported alive")
	}
}
