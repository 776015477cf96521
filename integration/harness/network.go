package harness

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
	"golang.org/x/sys/unix"
)

// TcpClient is one connection to the server, kept open across checkpoints.
type TcpClient struct {
	t    testing.TB
	Conn net.Conn
	R    *bufio.Reader
}

func DialServer(t testing.TB, addr string) *TcpClient {
	t.Helper()
	var conn net.Conn
	WaitFor(t, 20*time.Second, "the server at "+addr, func() bool {
		var err error
		conn, err = net.DialTimeout("tcp", addr, time.Second)
		return err == nil
	})
	t.Cleanup(func() { conn.Close() })
	return &TcpClient{t: t, Conn: conn, R: bufio.NewReader(conn)}
}

// ping sends a request and returns the server's count.
func (c *TcpClient) ping() (int, error) {
	c.Conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Conn.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := c.R.ReadString('\n')
	if err != nil {
		return 0, err
	}
	return parsePong(line)
}

func (c *TcpClient) MustPing() int {
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

// UdpPing sends one datagram and returns the server's count.
func UdpPing(t testing.TB, addr string) int {
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

// CarriedOn checks a restored server's count across its sockets: want on
// the kept connection c, want+1 on a new one, want+2 over UDP.
func CarriedOn(t testing.TB, c *TcpClient, addr string, want int) {
	t.Helper()
	if n := c.MustPing(); n != want {
		t.Fatalf("on the kept connection the restored server answered %d, want %d", n, want)
	}
	if n := DialServer(t, addr).MustPing(); n != want+1 {
		t.Fatalf("a new connection got %d, want %d", n, want+1)
	}
	if n := UdpPing(t, addr); n != want+2 {
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

// PingIn asks the server in pid's network namespace over a new TCP
// connection and over UDP, and returns both counts.
func PingIn(t testing.TB, pid, port int) (tcp, udp int) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var err error
	inNetns(t, pid, func() {
		var conn net.Conn
		if conn, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			return
		}
		defer conn.Close()
		c := &TcpClient{t: t, Conn: conn, R: bufio.NewReader(conn)}
		if tcp, err = c.ping(); err != nil {
			return
		}
		udp = UdpPing(t, addr)
	})
	if err != nil {
		t.Fatalf("server in the namespace of pid %d: %v", pid, err)
	}
	return tcp, udp
}

// SetArgs sets the process args of a bundle's spec.
func SetArgs(t *testing.T, bundle string, args ...string) {
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

// refusedTCPCheckpoint checks that a checkpoint without open_tcp fails with
// the remedy and leaves the server running: it answers want on conn.
func (d *Daemon) RefusedTCPCheckpoint(id string, conn *TcpClient, want int) {
	d.T.Helper()
	_, err := d.Task(id).Checkpoint(NamespacedCtx(), client.WithCheckpointName(fmt.Sprintf("%s-refused-%d", id, want)),
		WithCheckpointOptions(&options.CheckpointOptions{Exit: true}))
	if err == nil {
		d.T.Fatal("checkpoint of an established connection without open_tcp succeeded")
	}
	WantIn(d.T, err.Error(), "established TCP connection", "open_tcp", "left running")
	WaitFor(d.T, 10*time.Second, id+" running", func() bool { return d.TaskStatus(id) == client.Running })
	if n := conn.MustPing(); n != want {
		d.T.Fatalf("after the refused checkpoint the server answered %d, want %d", n, want)
	}
}

// WithCheckpointOptions sets the runc checkpoint options of a task
// checkpoint, as client.WithCheckpointTaskExit does for Exit alone.
func WithCheckpointOptions(o *options.CheckpointOptions) client.CheckpointTaskOpts {
	return func(r *client.CheckpointTaskInfo) error {
		r.Options = o
		return nil
	}
}
