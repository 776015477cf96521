package integration

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
)

// `podman run -t`: conmon gives the container a pty, and runc binds it at
// /dev/console, outside the spec's mounts. The checkpoint exports and
// imports through cryo-runc, and the app continues on its restored pty.
func TestPodmanTerminal(t *testing.T) {
	p := newPodman(t)
	args := append(append([]string{"run", "-d", "-t", "--name", "tty"}, podmanStandIn...), podmanImage, "/bin/fakecuda-app", "100")
	p.podman(t, args...)
	p.waitTicks(t, "tty", 3)
	export := filepath.Join(p.dir, "tty.tar.zst")
	p.podman(t, "container", "checkpoint", "--export", export, "tty")
	before := podmanLastTick(p.ticks(t, "tty"))
	dir := t.TempDir()
	run(t, time.Minute, nil, "tar", "--zstd", "-xf", export, "-C", dir, "--wildcards", "checkpoint/mountpoints-*.img")
	if m := mountAt(t, filepath.Join(dir, "checkpoint"), "/dev/console"); m.GetFstype() != uint32(mnt.Fstype_DEVPTS) {
		t.Fatalf("the checkpoint's /dev/console is %s, want runc's devpts bind", mnt.Fstype(m.GetFstype()))
	}
	p.podman(t, "rm", "-f", "tty")
	p.podman(t, "container", "restore", "--import", export)
	if st := p.state(t, "tty"); st != "running" {
		t.Fatalf("the restored terminal container is %s", st)
	}
	p.requireContinued(t, "tty", before)
}
