package testsupport

import (
	"net"
	"strconv"
	"testing"
)

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago, for
// a server that the test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeAddr is FreePort as an address, "127.0.0.1:PORT".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
