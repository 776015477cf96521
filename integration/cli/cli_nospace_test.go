package cli

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// A checkpoint into a file system too small for it is refused before the
// suspend, with the estimate and the space free, not after a dump that
// fills the disk and ends in CRIU's "No space left on device".
func TestCLICheckpointNoSpace(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	small := t.TempDir()
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(small, syscall.MNT_DETACH) })
	img := filepath.Join(small, "img")
	_, stderr, code := harness.CryoSplit(t, env, "checkpoint", "--leave-running", "--pid", strconv.Itoa(p.PID), "--dir", img)
	if code != 1 {
		t.Fatalf("checkpoint into 64 KiB: exit %d, want 1:\n%s", code, stderr)
	}
	harness.WantIn(t, stderr, "not enough space for the checkpoint", "is estimated at about", "has 64.0 KiB free", "nothing was suspended", "remedy: free at least", "CRYO_SPACE_CHECK=0 skips this check")
	if strings.Contains(stderr, "CRIU log") {
		t.Errorf("the refusal points at CRIU's log:\n%s", stderr)
	}
	stdout, _, _ := harness.CryoSplit(t, env, "cuda", "state", "--format", "{{.state}}", strconv.Itoa(p.PID))
	if stdout != "running\n" {
		t.Fatalf("after the refusal the CUDA state is %q, want running", stdout)
	}
	p.WaitTicks(t, p.LastTick(t)+2)
}
