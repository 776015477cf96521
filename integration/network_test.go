package integration

// Network servers with CRIU 4.2 (4.1 cannot dump a TCP or UDP socket on
// Linux 6.16 and later): a server listening on TCP and UDP is checkpointed
// and restored and answers on the same port, its state carried on; an
// established connection is kept where asked and refused with a clear
// error where not.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// netPort picks a free loopback port for a test server.
func netPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tcpClient is one connection to the server, kept open across checkpoints.
type tcpClient struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialServer(t *testing.T, addr string) *tcpClient {
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
func udpPing(t *testing.T, addr string) int {
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

func netServerScript() string {
	return filepath.Join(repoRoot(), "integration", "testdata", "netserver.py")
}

// TestBareNetworkServer: `cryo checkpoint --pid` / `cryo restore` of a
// server with a listening TCP socket, a UDP socket and an established
// connection from the test.
func TestBareNetworkServer(t *testing.T) {
	requireRoot(t)
	port := netPort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := startBare(t, nil, nil, "python3 -u "+netServerScript()+" "+strconv.Itoa(port)+" </dev/null")
	c := dialServer(t, addr)
	if n := c.mustPing(); n != 1 {
		t.Fatalf("first answer %d", n)
	}
	udpPing(t, addr) // 2

	// Without --tcp-established the established connection is refused,
	// with the flag to use, and the server goes on.
	out := bareCryoFails(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", filepath.Join(t.TempDir(), "img"), "--leave-running")
	wantIn(t, out, "--tcp-established", "the processes were left running")
	if n := c.mustPing(); n != 3 {
		t.Fatalf("after the refused checkpoint the server answered %d, want 3", n)
	}

	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img, "--tcp-established")
	waitFor(t, 10*time.Second, "the dumped server to go", func() bool { return !p.alive() })
	bareCryo(t, nil, "restore", "--dir", img, "--tcp-established")
	if n := c.mustPing(); n != 4 {
		t.Fatalf("on the kept connection the restored server answered %d, want 4", n)
	}
	if n := dialServer(t, addr).mustPing(); n != 5 {
		t.Fatalf("a new connection got %d, want 5", n)
	}
	if n := udpPing(t, addr); n != 6 {
		t.Fatalf("UDP after the restore: %d, want 6", n)
	}
	_ = os.Remove(img)
}
