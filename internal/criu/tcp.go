package criu

import (
	"os"
	"strings"
)

// Established TCP connections. CRIU dumps a process that holds one only
// with tcp-established, and then keeps the connection locked (the peer sees
// no reset) until the restore. It writes one tcp-stream-<inode>.img per
// connection and restores those images only with tcp-established again. So
// the user opts in at the checkpoint, each front end its own way, and a
// restore passes the option when the images hold such connections.

// TCPEstablished is CRIU's option, as a line of its configuration file.
const TCPEstablished = "tcp-established"

// EstablishedTCP counts the established TCP connections held by the
// checkpoint in the CRIU image directory dir.
func EstablishedTCP(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "tcp-stream-") && strings.HasSuffix(e.Name(), ".img") {
			n++
		}
	}
	return n, nil
}
