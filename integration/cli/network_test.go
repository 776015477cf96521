package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// netServerBin is testdata/netserver.c, built statically by `make fake`
// (test root filesystems carry it as /bin/netserver).
func netServerBin(t *testing.T) string { return harness.FakeFile(t, "netserver") }

// startBareNetServer starts netserver (with args) as a bare process on a
// free port, connects to it and checks its first answer.
func startBareNetServer(t *testing.T, args ...string) (*harness.BareProc, *harness.TcpClient, string) {
	t.Helper()
	harness.RequireRoot(t)
	port := strconv.Itoa(testsupport.FreePort(t))
	p := harness.StartBare(t, nil, nil, strings.Join(append([]string{netServerBin(t), port}, args...), " ")+" </dev/null")
	c := harness.DialServer(t, "127.0.0.1:"+port)
	if n := c.MustPing(); n != 1 {
		t.Fatalf("first answer %d", n)
	}
	return p, c, "127.0.0.1:" + port
}

// TestBareNetworkServer: `cryo checkpoint --pid` / `cryo restore` of a
// server with a listening TCP socket, a UDP socket and an established
// connection from the test.
func TestBareNetworkServer(t *testing.T) {
	p, c, addr := startBareNetServer(t)
	harness.UdpPing(t, addr) // 2

	// Without --tcp-established the established connection is refused,
	// with the flag to use, and the server goes on.
	out := harness.BareCryoFails(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", filepath.Join(t.TempDir(), "img"), "--leave-running")
	harness.WantIn(t, out, "established TCP connection", "cryo checkpoint --tcp-established", "the processes were left running")
	if n := c.MustPing(); n != 3 {
		t.Fatalf("after the refused checkpoint the server answered %d, want 3", n)
	}

	// The restore needs no flag: the checkpoint holds the connection.
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--tcp-established")
	harness.WaitFor(t, 10*time.Second, "the dumped server to go", func() bool { return !p.Alive() })
	out = harness.BareCryo(t, nil, "restore", "--dir", img)
	harness.WantIn(t, out, "restored 1 established TCP connection")
	harness.CarriedOn(t, c, addr, 4)
	_ = os.Remove(img)
}

// TestBareNetworkServerTimeWait: a server whose listener has no
// SO_REUSEADDR (as NCCL's and PyTorch's bootstrap listeners) closed a
// connection first, which leaves a TIME_WAIT socket on its port for 60 s;
// the kernel lets no new listener bind that port meanwhile. A restore right
// after the checkpoint waits for it to expire, saying so, instead of
// failing in CRIU with "Address already in use".
func TestBareNetworkServerTimeWait(t *testing.T) {
	p, c, addr := startBareNetServer(t, "noreuse")
	c.Conn.Write([]byte("bye\n"))
	if line, err := c.R.ReadString('\n'); err != nil || line != "bye\n" {
		t.Fatalf("bye: %q %v", line, err)
	}
	harness.WaitFor(t, 5*time.Second, "the server to close the connection first", func() bool {
		_, err := c.R.ReadByte()
		return err != nil
	})
	c.Conn.Close() // the server's side goes from FIN_WAIT2 to TIME_WAIT
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WaitFor(t, 10*time.Second, "the dumped server to go", func() bool { return !p.Alive() })
	start := time.Now()
	out := harness.BareCryo(t, nil, "restore", "--dir", img)
	harness.WantIn(t, out, "waiting for the listening ports to leave TIME_WAIT")
	t.Logf("the restore waited for TIME_WAIT and took %s", time.Since(start).Round(time.Second))
	if n := harness.DialServer(t, addr).MustPing(); n != 2 {
		t.Fatalf("the restored server answered %d, want 2", n)
	}
}

// TestRuncwrapNetworkServer: a server in a container with a network
// namespace of its own (cryo-runc, runc's default spec) answers on its
// loopback after a restore, its count carried on; a clone restored next to
// the running original answers in its own namespace while the original
// still does.
func TestRuncwrapNetworkServer(t *testing.T) {
	harness.RequireRoot(t)
	dir := t.TempDir()
	bundle := harness.RwBundle(t, filepath.Join(dir, "bundle"))
	const port = 7070
	harness.SetArgs(t, bundle, "/bin/netserver", strconv.Itoa(port))
	root := filepath.Join(dir, "runc-root")
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_RUNC=/usr/sbin/runc")
	wrap := harness.CryoBin(t, "cryo-runc")
	id := "cryo-net-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id)
		harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id+"-clone")
	})
	statePID := func(id string) int {
		out := harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", root, "state", id)
		var st struct{ Pid int }
		json.Unmarshal([]byte(out), &st)
		return st.Pid
	}
	harness.RwRunDetached(t, env, wrap, "--root", root, "run", "-d", "--bundle", bundle, id)
	harness.WaitFor(t, 10*time.Second, "the server", func() bool {
		_, err := harness.RunErr(5*time.Second, nil, "nsenter", "-t", strconv.Itoa(statePID(id)), "-n", "true")
		return err == nil
	})
	// runc's default spec gives the container a network namespace with its
	// loopback down (as Podman's --network none does); bring it up, as a
	// network plugin would.
	harness.Run(t, 10*time.Second, nil, "nsenter", "-t", strconv.Itoa(statePID(id)), "-n", "ip", "link", "set", "lo", "up")
	if a, b := harness.PingIn(t, statePID(id), port); a != 1 || b != 2 {
		t.Fatalf("before the checkpoint: %d %d", a, b)
	}

	img := filepath.Join(dir, "img")
	harness.Run(t, time.Minute, env, wrap, "--root", root, "checkpoint", "--image-path", img, "--work-path", img+"-w", id)
	harness.RwRunDetached(t, env, wrap, "--root", root, "restore", "-d", "--image-path", img, "--work-path", img+"-r", "--bundle", bundle, id)
	if a, b := harness.PingIn(t, statePID(id), port); a != 3 || b != 4 {
		t.Fatalf("after the restore the server answered %d and %d, want 3 and 4 (its count carried on)", a, b)
	}

	img2 := filepath.Join(dir, "img2")
	harness.Run(t, time.Minute, env, wrap, "--root", root, "checkpoint", "--leave-running", "--image-path", img2, "--work-path", img2+"-w", id)
	harness.RwRunDetached(t, env, wrap, "--root", root, "restore", "-d", "--image-path", img2, "--work-path", img2+"-r", "--bundle", bundle, id+"-clone")
	if a, _ := harness.PingIn(t, statePID(id+"-clone"), port); a != 5 {
		t.Fatalf("the clone answered %d, want 5 (the count at its checkpoint, 4, plus one)", a)
	}
	// Two servers now, each with its own count from 4 on.
	if a, _ := harness.PingIn(t, statePID(id), port); a != 5 {
		t.Fatalf("the original answered %d, want 5", a)
	}
}

// TestBareRefusesIOUring: a process holding an io_uring instance (as
// PyTorch's TCPStore does through libuv) is refused before anything is
// suspended or dumped, with the remedy, and keeps running.
func TestBareRefusesIOUring(t *testing.T) {
	harness.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "iouring")
	harness.Run(t, time.Minute, nil, "gcc", "-O2", "-o", bin, filepath.Join(harness.RepoRoot(), "integration", "testdata", "iouring.c"))
	p := harness.StartBare(t, nil, nil, bin+" </dev/null")
	harness.WaitFor(t, 10*time.Second, "ready", func() bool { return strings.Contains(p.Output(), "ready") })
	img := filepath.Join(t.TempDir(), "img")
	out := harness.BareCryoFails(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WantIn(t, out, "io_uring", "USE_LIBUV=0", "nothing was suspended")
	if !p.Alive() {
		t.Fatal("the refused process is gone")
	}
	if _, err := os.Stat(filepath.Join(img, "criu-dump.log")); err == nil {
		t.Fatal("CRIU ran although the checkpoint was refused")
	}
}

// TestPodmanNetworkServer: Podman with cryo-runc, `--network none` (a
// namespace with only a loopback): the server answers on its loopback
// after an export and an import, its count carried on. CRIU restores the
// loopback down; cryo-runc brings it back up.
func TestPodmanNetworkServer(t *testing.T) {
	p := harness.NewPodman(t)
	const port = 7072
	export := exportNetServer(t, p, port)
	p.Podman(t, "container", "restore", "--import", export)
	pingNetServer(t, p, port, 3, 4, "after the import")
}

// exportNetServer runs the server "net" with `--network none` on port,
// checks its first two answers, exports a checkpoint of it and removes it;
// it returns the export.
func exportNetServer(t *testing.T, p *harness.PodmanEnv, port int) string {
	t.Helper()
	p.Podman(t, "run", "-d", "--name", "net", "--network", "none", harness.PodmanImage, "/bin/netserver", strconv.Itoa(port))
	harness.WaitFor(t, 10*time.Second, "the server", func() bool {
		out, _ := p.PodmanErr("logs", "net")
		return strings.Contains(out, "listening")
	})
	pingNetServer(t, p, port, 1, 2, "before the checkpoint")
	export := filepath.Join(p.Dir, "net.tar.zst")
	p.Podman(t, "container", "checkpoint", "--export", export, "net")
	p.Podman(t, "rm", "-f", "net")
	return export
}

// pingNetServer pings the server "net" twice in its network namespace and
// wants the answers a and b.
func pingNetServer(t *testing.T, p *harness.PodmanEnv, port, a, b int, when string) {
	t.Helper()
	pid, _ := strconv.Atoi(strings.TrimSpace(p.Podman(t, "inspect", "-f", "{{.State.Pid}}", "net")))
	if x, y := harness.PingIn(t, pid, port); x != a || y != b {
		t.Fatalf("%s the server answered %d and %d, want %d and %d", when, x, y, a, b)
	}
}

// TestPodmanNetworkTCP: Podman with cryo-runc, `--network host`: a server
// keeps an established connection across `podman container checkpoint
// --tcp-established` and a restore in place, with or without
// --tcp-established (cryo-runc adds it when the checkpoint holds a
// connection). Without the flag the checkpoint is refused, naming it, and
// the server goes on.
func TestPodmanNetworkTCP(t *testing.T) {
	p := harness.NewPodman(t)
	port := testsupport.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p.Podman(t, "run", "-d", "--name", "tcp", "--network", "host", harness.PodmanImage, "/bin/netserver", strconv.Itoa(port))
	conn := harness.DialServer(t, addr)
	if n := conn.MustPing(); n != 1 {
		t.Fatalf("first answer %d", n)
	}
	out, err := p.PodmanErr("container", "checkpoint", "tcp")
	if err == nil {
		t.Fatalf("checkpoint of an established connection without --tcp-established succeeded:\n%s", out)
	}
	harness.WantIn(t, out, "established TCP connection", "podman container checkpoint --tcp-established", "left running")
	if st := p.State(t, "tcp"); st != "running" {
		t.Fatalf("after the refused checkpoint the container is %s", st)
	}
	if n := conn.MustPing(); n != 2 {
		t.Fatalf("after the refused checkpoint the server answered %d, want 2", n)
	}

	p.Podman(t, "container", "checkpoint", "--tcp-established", "tcp")
	p.Podman(t, "container", "restore", "--tcp-established", "tcp")
	if n := conn.MustPing(); n != 3 {
		t.Fatalf("on the kept connection the restored server answered %d, want 3", n)
	}
	p.Podman(t, "container", "checkpoint", "--tcp-established", "tcp")
	p.Podman(t, "container", "restore", "tcp")
	if n := conn.MustPing(); n != 4 {
		t.Fatalf("restored without --tcp-established, the server answered %d on the kept connection, want 4", n)
	}
	if n := harness.DialServer(t, addr).MustPing(); n != 5 {
		t.Fatalf("a new connection got %d, want 5", n)
	}
	if n := harness.UdpPing(t, addr); n != 6 {
		t.Fatalf("UDP after the restore: %d, want 6", n)
	}
}

// TestPodmanRestoreLostCgroupHierarchy: on cgroup v1, runc binds into a
// container every cgroup v1 hierarchy the host has mounted when it starts,
// and at restore maps only those mounted then. A hierarchy mounted on the
// host for the container's start and checkpoint, and unmounted before its
// restore, fails the restore with CRIU's "mnt: No mapping for N:(null)
// mountpoint" (TestPodmanNetworkServer once failed so on a shared host);
// cryo-runc's report names the hierarchy and how to mount it again, and
// once it is mounted again the same checkpoint restores. The hierarchy is
// mounted on the host for this test's two seconds only: a container any
// runtime starts meanwhile gets it too.
func TestPodmanRestoreLostCgroupHierarchy(t *testing.T) {
	harness.RequireRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		t.Skip("cgroup v2: runc binds no cgroup v1 hierarchy into a container")
	}
	const name = "cryotest"
	// The host's mount point: runc names the container's bind by its base
	// name. Unmounted after the container is removed (cleanups run last
	// first), so that the hierarchy goes with it.
	hier := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(hier, 0o755); err != nil {
		t.Fatal(err)
	}
	mountHier := func() {
		harness.Run(t, time.Minute, nil, "mount", "-t", "cgroup", "-o", "none,name="+name, "cgroup", hier)
	}
	t.Cleanup(func() { harness.RunErr(time.Minute, nil, "umount", hier) })
	p := harness.NewPodman(t)
	mountHier()
	const port = 7073
	export := exportNetServer(t, p, port)
	harness.Run(t, time.Minute, nil, "umount", hier)

	out, err := p.PodmanErr("container", "restore", "--import", export)
	if err == nil {
		t.Fatalf("restore without the hierarchy the container started with succeeded:\n%s", out)
	}
	harness.WantIn(t, out, "No mapping for", "/sys/fs/cgroup/"+name, "cgroup v1 hierarchy name="+name, "no longer has",
		"mount -t cgroup -o none,name="+name+" cgroup /sys/fs/cgroup/"+name)

	mountHier()
	p.PodmanErr("rm", "-f", "net") // whatever the failed import left
	p.Podman(t, "container", "restore", "--import", export)
	pingNetServer(t, p, port, 3, 4, "after the import")
}
