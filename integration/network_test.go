package integration

// Network servers with CRIU 4.2 (4.1 cannot dump a TCP or UDP socket on
// Linux 6.16 and later): a server listening on TCP and UDP is checkpointed
// and restored and answers on the same port, its state carried on; an
// established connection is kept where asked and refused with a clear
// error where not.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// tcpClient is one connection to the server, kept open across checkpoints.
type tcpClient struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
}

func dialServer(t testing.TB, addr string) *tcpClient {
	t.Helper()
	var conn net.Conn
	waitFor(t, 20*time.Second, "the server at "+addr, func() bool {
		var err error
		conn, err = net.DialTimeout("tcp", addr, time.Second)
		return err == nil
	})
	t.Cleanup(func() { conn.Close() })
	return &tcpClient{t: t, conn: conn, r: bufio.NewReader(conn)}
}

// ping sends a request and returns the server's count.
func (c *tcpClient) ping() (int, error) {
	c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	return parsePong(line)
}

func (c *tcpClient) mustPing() int {
	c.t.Helper()
	n, err := c.ping()
	if err != nil {
		c.t.Fatalf("TCP request: %v", err)
	}
	return n
}

func parsePong(line string) (int, error) {
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(line), "pong %d", &n); err != nil {
		return 0, fmt.Errorf("answer %q: %w", line, err)
	}
	return n, nil
}

// udpPing sends one datagram and returns the server's count.
func udpPing(t testing.TB, addr string) int {
	t.Helper()
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 64)
	for try := 0; try < 5; try++ {
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		conn.Write([]byte("ping"))
		n, err := conn.Read(buf)
		if err == nil {
			c, err := parsePong(string(buf[:n]))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatalf("no UDP answer from %s", addr)
	return 0
}

// netServerBin is testdata/netserver.c, built statically by `make fake`
// (test root filesystems carry it as /bin/netserver).
func netServerBin(t *testing.T) string { return fakeFile(t, "netserver") }

// startBareNetServer starts netserver (with args) as a bare process on a
// free port, connects to it and checks its first answer.
func startBareNetServer(t *testing.T, args ...string) (*bareProc, *tcpClient, string) {
	t.Helper()
	requireRoot(t)
	port := strconv.Itoa(testsupport.FreePort(t))
	p := startBare(t, nil, nil, strings.Join(append([]string{netServerBin(t), port}, args...), " ")+" </dev/null")
	c := dialServer(t, "127.0.0.1:"+port)
	if n := c.mustPing(); n != 1 {
		t.Fatalf("first answer %d", n)
	}
	return p, c, "127.0.0.1:" + port
}

// TestBareNetworkServer: `cryo checkpoint --pid` / `cryo restore` of a
// server with a listening TCP socket, a UDP socket and an established
// connection from the test.
func TestBareNetworkServer(t *testing.T) {
	p, c, addr := startBareNetServer(t)
	udpPing(t, addr) // 2

	// Without --tcp-established the established connection is refused,
	// with the flag to use, and the server goes on.
	out := bareCryoFails(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", filepath.Join(t.TempDir(), "img"), "--leave-running")
	wantIn(t, out, "established TCP connection", "cryo checkpoint --tcp-established", "the processes were left running")
	if n := c.mustPing(); n != 3 {
		t.Fatalf("after the refused checkpoint the server answered %d, want 3", n)
	}

	// The restore needs no flag: the checkpoint holds the connection.
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img, "--tcp-established")
	waitFor(t, 10*time.Second, "the dumped server to go", func() bool { return !p.alive() })
	out = bareCryo(t, nil, "restore", "--dir", img)
	wantIn(t, out, "restored 1 established TCP connection")
	carriedOn(t, c, addr, 4)
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
	c.conn.Write([]byte("bye\n"))
	if line, err := c.r.ReadString('\n'); err != nil || line != "bye\n" {
		t.Fatalf("bye: %q %v", line, err)
	}
	waitFor(t, 5*time.Second, "the server to close the connection first", func() bool {
		_, err := c.r.ReadByte()
		return err != nil
	})
	c.conn.Close() // the server's side goes from FIN_WAIT2 to TIME_WAIT
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	waitFor(t, 10*time.Second, "the dumped server to go", func() bool { return !p.alive() })
	start := time.Now()
	out := bareCryo(t, nil, "restore", "--dir", img)
	wantIn(t, out, "waiting for the listening ports to leave TIME_WAIT")
	t.Logf("the restore waited for TIME_WAIT and took %s", time.Since(start).Round(time.Second))
	if n := dialServer(t, addr).mustPing(); n != 2 {
		t.Fatalf("the restored server answered %d, want 2", n)
	}
}

// carriedOn checks a restored server's count across its sockets: want on
// the kept connection c, want+1 on a new one, want+2 over UDP.
func carriedOn(t testing.TB, c *tcpClient, addr string, want int) {
	t.Helper()
	if n := c.mustPing(); n != want {
		t.Fatalf("on the kept connection the restored server answered %d, want %d", n, want)
	}
	if n := dialServer(t, addr).mustPing(); n != want+1 {
		t.Fatalf("a new connection got %d, want %d", n, want+1)
	}
	if n := udpPing(t, addr); n != want+2 {
		t.Fatalf("UDP after the restore: %d, want %d", n, want+2)
	}
}

// inNetns runs f on a thread in the network namespace of pid: sockets it
// opens live there (a container's loopback). The thread is not given back
// to the scheduler: it ends with f's goroutine.
func inNetns(t testing.TB, pid int, f func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err == nil {
			f()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("enter the network namespace of pid %d: %v", pid, err)
	}
}

// pingIn asks the server in pid's network namespace over a new TCP
// connection and over UDP, and returns both counts.
func pingIn(t testing.TB, pid, port int) (tcp, udp int) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var err error
	inNetns(t, pid, func() {
		var conn net.Conn
		if conn, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			return
		}
		defer conn.Close()
		c := &tcpClient{t: t, conn: conn, r: bufio.NewReader(conn)}
		if tcp, err = c.ping(); err != nil {
			return
		}
		udp = udpPing(t, addr)
	})
	if err != nil {
		t.Fatalf("server in the namespace of pid %d: %v", pid, err)
	}
	return tcp, udp
}

// TestRuncwrapNetworkServer: a server in a container with a network
// namespace of its own (cryo-runc, runc's default spec) answers on its
// loopback after a restore, its count carried on; a clone restored next to
// the running original answers in its own namespace while the original
// still does.
func TestRuncwrapNetworkServer(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	bundle := rwBundle(t, filepath.Join(dir, "bundle"))
	const port = 7070
	setArgs(t, bundle, "/bin/netserver", strconv.Itoa(port))
	root := filepath.Join(dir, "runc-root")
	env := append(fakeDriverEnv(t, ""), "CRYO_RUNC=/usr/sbin/runc")
	wrap := cryoBin(t, "cryo-runc")
	id := "cryo-net-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id)
		runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "delete", "-f", id+"-clone")
	})
	statePID := func(id string) int {
		out := run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", root, "state", id)
		var st struct{ Pid int }
		json.Unmarshal([]byte(out), &st)
		return st.Pid
	}
	rwRunDetached(t, env, wrap, "--root", root, "run", "-d", "--bundle", bundle, id)
	waitFor(t, 10*time.Second, "the server", func() bool {
		_, err := runErr(5*time.Second, nil, "nsenter", "-t", strconv.Itoa(statePID(id)), "-n", "true")
		return err == nil
	})
	// runc's default spec gives the container a network namespace with its
	// loopback down (as Podman's --network none does); bring it up, as a
	// network plugin would.
	run(t, 10*time.Second, nil, "nsenter", "-t", strconv.Itoa(statePID(id)), "-n", "ip", "link", "set", "lo", "up")
	if a, b := pingIn(t, statePID(id), port); a != 1 || b != 2 {
		t.Fatalf("before the checkpoint: %d %d", a, b)
	}

	img := filepath.Join(dir, "img")
	run(t, time.Minute, env, wrap, "--root", root, "checkpoint", "--image-path", img, "--work-path", img+"-w", id)
	rwRunDetached(t, env, wrap, "--root", root, "restore", "-d", "--image-path", img, "--work-path", img+"-r", "--bundle", bundle, id)
	if a, b := pingIn(t, statePID(id), port); a != 3 || b != 4 {
		t.Fatalf("after the restore the server answered %d and %d, want 3 and 4 (its count carried on)", a, b)
	}

	img2 := filepath.Join(dir, "img2")
	run(t, time.Minute, env, wrap, "--root", root, "checkpoint", "--leave-running", "--image-path", img2, "--work-path", img2+"-w", id)
	rwRunDetached(t, env, wrap, "--root", root, "restore", "-d", "--image-path", img2, "--work-path", img2+"-r", "--bundle", bundle, id+"-clone")
	if a, _ := pingIn(t, statePID(id+"-clone"), port); a != 5 {
		t.Fatalf("the clone answered %d, want 5 (the count at its checkpoint, 4, plus one)", a)
	}
	// Two servers now, each with its own count from 4 on.
	if a, _ := pingIn(t, statePID(id), port); a != 5 {
		t.Fatalf("the original answered %d, want 5", a)
	}
}

// setArgs sets the process args of a bundle's spec.
func setArgs(t *testing.T, bundle string, args ...string) {
	t.Helper()
	path := filepath.Join(bundle, "config.json")
	data, _ := os.ReadFile(path)
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	spec["process"].(map[string]any)["args"] = args
	data, _ = json.Marshal(spec)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// testNetworkServer: through the shim, a server in a container with its own
// network namespace is checkpointed (--exit) and restored into the same
// container; it answers on its loopback, its count carried on.
func testNetworkServer(d *daemon) {
	const port = 7071
	ctx := namespacedCtx()
	img, err := d.client.GetImage(ctx, testImage)
	if err != nil {
		d.t.Fatal(err)
	}
	c, err := d.client.NewContainer(ctx, "net", client.WithImage(img), client.WithNewSnapshot("net-snap", img),
		client.WithRuntime(cryoRuntime, nil), client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs("/bin/netserver", strconv.Itoa(port))))
	if err != nil {
		d.t.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(d.dir, "logs"), 0o755)
	task, err := c.NewTask(ctx, cio.LogFile(d.logPath("net")))
	if err != nil {
		d.t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		d.t.Fatal(err)
	}
	t := d.t
	run(t, 10*time.Second, nil, "nsenter", "-t", strconv.Itoa(int(task.Pid())), "-n", "ip", "link", "set", "lo", "up")
	waitFor(t, 10*time.Second, "the server", func() bool { return strings.Contains(readFile(d.logPath("net")), "listening") })
	if a, b := pingIn(t, int(task.Pid()), port); a != 1 || b != 2 {
		t.Fatalf("before the checkpoint: %d %d", a, b)
	}
	ref, _ := d.taskCheckpoint("net", "--exit")
	d.waitStopped("net")
	d.restoreTask(ref, "net")
	if a, b := pingIn(t, d.taskPid("net"), port); a != 3 || b != 4 {
		t.Fatalf("after the restore the server answered %d and %d, want 3 and 4", a, b)
	}
	d.remove("net")
}

// testNetworkTCP: through the shim, a server on the host's network keeps an
// established connection across a checkpoint with open_tcp and a restore,
// which passes tcp-established to CRIU by itself. A checkpoint without
// open_tcp is refused, naming the option, and the server goes on; so is
// one after the restore, whose tcp-established applied to it alone.
func testNetworkTCP(d *daemon) {
	t := d.t
	port := testsupport.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ctx := namespacedCtx()
	img, err := d.client.GetImage(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.client.NewContainer(ctx, "tcp", client.WithImage(img), client.WithNewSnapshot("tcp-snap", img),
		client.WithRuntime(cryoRuntime, nil), client.WithNewSpec(oci.WithImageConfig(img),
			oci.WithHostNamespace(specs.NetworkNamespace), oci.WithProcessArgs("/bin/netserver", strconv.Itoa(port))))
	if err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(d.dir, "logs"), 0o755)
	task, err := c.NewTask(ctx, cio.LogFile(d.logPath("tcp")))
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn := dialServer(t, addr)
	if n := conn.mustPing(); n != 1 {
		t.Fatalf("first answer %d", n)
	}
	d.refusedTCPCheckpoint("tcp", conn, 2)

	ckpt, err := d.task("tcp").Checkpoint(ctx, withCheckpointOptions(&options.CheckpointOptions{Exit: true, OpenTcp: true}))
	if err != nil {
		t.Fatalf("checkpoint with open_tcp: %v\n%s", err, lastLines(d.log(), 30))
	}
	d.waitStopped("tcp")
	d.restoreTask(ckpt.Name(), "tcp")
	wantIn(t, d.log(), "restoring with tcp-established")
	carriedOn(t, conn, addr, 3)
	d.refusedTCPCheckpoint("tcp", conn, 6)
	d.remove("tcp")
}

// refusedTCPCheckpoint checks that a checkpoint without open_tcp fails with
// the remedy and leaves the server running: it answers want on conn.
func (d *daemon) refusedTCPCheckpoint(id string, conn *tcpClient, want int) {
	d.t.Helper()
	_, err := d.task(id).Checkpoint(namespacedCtx(), client.WithCheckpointName(fmt.Sprintf("%s-refused-%d", id, want)),
		withCheckpointOptions(&options.CheckpointOptions{Exit: true}))
	if err == nil {
		d.t.Fatal("checkpoint of an established connection without open_tcp succeeded")
	}
	wantIn(d.t, err.Error(), "established TCP connection", "open_tcp", "left running")
	waitFor(d.t, 10*time.Second, id+" running", func() bool { return d.taskStatus(id) == client.Running })
	if n := conn.mustPing(); n != want {
		d.t.Fatalf("after the refused checkpoint the server answered %d, want %d", n, want)
	}
}

// withCheckpointOptions sets the runc checkpoint options of a task
// checkpoint, as client.WithCheckpointTaskExit does for Exit alone.
func withCheckpointOptions(o *options.CheckpointOptions) client.CheckpointTaskOpts {
	return func(r *client.CheckpointTaskInfo) error {
		r.Options = o
		return nil
	}
}

// TestBareRefusesIOUring: a process holding an io_uring instance (as
// PyTorch's TCPStore does through libuv) is refused before anything is
// suspended or dumped, with the remedy, and keeps running.
func TestBareRefusesIOUring(t *testing.T) {
	requireRoot(t)
	bin := filepath.Join(t.TempDir(), "iouring")
	run(t, time.Minute, nil, "gcc", "-O2", "-o", bin, filepath.Join(repoRoot(), "integration", "testdata", "iouring.c"))
	p := startBare(t, nil, nil, bin+" </dev/null")
	waitFor(t, 10*time.Second, "ready", func() bool { return strings.Contains(p.output(), "ready") })
	img := filepath.Join(t.TempDir(), "img")
	out := bareCryoFails(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	wantIn(t, out, "io_uring", "USE_LIBUV=0", "nothing was suspended")
	if !p.alive() {
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
	p := newPodman(t)
	const port = 7072
	export := exportNetServer(t, p, port)
	p.podman(t, "container", "restore", "--import", export)
	pingNetServer(t, p, port, 3, 4, "after the import")
}

// exportNetServer runs the server "net" with `--network none` on port,
// checks its first two answers, exports a checkpoint of it and removes it;
// it returns the export.
func exportNetServer(t *testing.T, p *podmanEnv, port int) string {
	t.Helper()
	p.podman(t, "run", "-d", "--name", "net", "--network", "none", podmanImage, "/bin/netserver", strconv.Itoa(port))
	waitFor(t, 10*time.Second, "the server", func() bool {
		out, _ := p.podmanErr("logs", "net")
		return strings.Contains(out, "listening")
	})
	pingNetServer(t, p, port, 1, 2, "before the checkpoint")
	export := filepath.Join(p.dir, "net.tar.zst")
	p.podman(t, "container", "checkpoint", "--export", export, "net")
	p.podman(t, "rm", "-f", "net")
	return export
}

// pingNetServer pings the server "net" twice in its network namespace and
// wants the answers a and b.
func pingNetServer(t *testing.T, p *podmanEnv, port, a, b int, when string) {
	t.Helper()
	pid, _ := strconv.Atoi(strings.TrimSpace(p.podman(t, "inspect", "-f", "{{.State.Pid}}", "net")))
	if x, y := pingIn(t, pid, port); x != a || y != b {
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
	p := newPodman(t)
	port := testsupport.FreePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p.podman(t, "run", "-d", "--name", "tcp", "--network", "host", podmanImage, "/bin/netserver", strconv.Itoa(port))
	conn := dialServer(t, addr)
	if n := conn.mustPing(); n != 1 {
		t.Fatalf("first answer %d", n)
	}
	out, err := p.podmanErr("container", "checkpoint", "tcp")
	if err == nil {
		t.Fatalf("checkpoint of an established connection without --tcp-established succeeded:\n%s", out)
	}
	wantIn(t, out, "established TCP connection", "podman container checkpoint --tcp-established", "left running")
	if st := p.state(t, "tcp"); st != "running" {
		t.Fatalf("after the refused checkpoint the container is %s", st)
	}
	if n := conn.mustPing(); n != 2 {
		t.Fatalf("after the refused checkpoint the server answered %d, want 2", n)
	}

	p.podman(t, "container", "checkpoint", "--tcp-established", "tcp")
	p.podman(t, "container", "restore", "--tcp-established", "tcp")
	if n := conn.mustPing(); n != 3 {
		t.Fatalf("on the kept connection the restored server answered %d, want 3", n)
	}
	p.podman(t, "container", "checkpoint", "--tcp-established", "tcp")
	p.podman(t, "container", "restore", "tcp")
	if n := conn.mustPing(); n != 4 {
		t.Fatalf("restored without --tcp-established, the server answered %d on the kept connection, want 4", n)
	}
	if n := dialServer(t, addr).mustPing(); n != 5 {
		t.Fatalf("a new connection got %d, want 5", n)
	}
	if n := udpPing(t, addr); n != 6 {
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
	requireRoot(t)
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
	mountHier := func() { run(t, time.Minute, nil, "mount", "-t", "cgroup", "-o", "none,name="+name, "cgroup", hier) }
	t.Cleanup(func() { runErr(time.Minute, nil, "umount", hier) })
	p := newPodman(t)
	mountHier()
	const port = 7073
	export := exportNetServer(t, p, port)
	run(t, time.Minute, nil, "umount", hier)

	out, err := p.podmanErr("container", "restore", "--import", export)
	if err == nil {
		t.Fatalf("restore without the hierarchy the container started with succeeded:\n%s", out)
	}
	wantIn(t, out, "No mapping for", "/sys/fs/cgroup/"+name, "cgroup v1 hierarchy name="+name, "no longer has",
		"mount -t cgroup -o none,name="+name+" cgroup /sys/fs/cgroup/"+name)

	mountHier()
	p.podmanErr("rm", "-f", "net") // whatever the failed import left
	p.podman(t, "container", "restore", "--import", export)
	pingNetServer(t, p, port, 3, 4, "after the import")
}
