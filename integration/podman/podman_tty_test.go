package podman

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"github.com/cryo-gpu/cryo/integration/harness"
)

// `podman run -t`: conmon gives the container a pty, and runc binds it at
// /dev/console, outside the spec's mounts. The checkpoint exports and
// imports through cryo-runc, and the app continues on its restored pty.
func TestPodmanTerminal(t *testing.T) {
	p := harness.NewPodman(t)
	args := append(append([]string{"run", "-d", "-t", "--name", "tty"}, harness.PodmanStandIn...), harness.PodmanImage, "/bin/fakecuda-app", "100")
	p.Podman(t, args...)
	p.WaitTicks(t, "tty", 3)
	export := filepath.Join(p.Dir, "tty.tar.zst")
	p.Podman(t, "container", "checkpoint", "--export", export, "tty")
	before := harness.PodmanLastTick(p.Ticks(t, "tty"))
	dir := t.TempDir()
	harness.Run(t, time.Minute, nil, "tar", "--zstd", "-xf", export, "-C", dir, "--wildcards", "checkpoint/mountpoints-*.img")
	if m := harness.MountAt(t, filepath.Join(dir, "checkpoint"), "/dev/console"); m.GetFstype() != uint32(mnt.Fstype_DEVPTS) {
		t.Fatalf("the checkpoint's /dev/console is %s, want runc's devpts bind", mnt.Fstype(m.GetFstype()))
	}
	p.Podman(t, "rm", "-f", "tty")
	p.Podman(t, "container", "restore", "--import", export)
	if st := p.State(t, "tty"); st != "running" {
		t.Fatalf("the restored terminal container is %s", st)
	}
	p.RequireContinued(t, "tty", before)
}
