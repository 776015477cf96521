package orchestrate

import (
	"os"
	"strings"
)

// Established TCP connections. CRIU dumps a process that holds one only
// with tcp-established, and then keeps the connection locked (the peer sees
// no reset) until the restore. It writes one tcp-stream-<inode>.img per
// connection and restores those images only with tcp-established again. So
// the user opts in at the checkpoint, each front end its own way
// (Orchestrator.TCPHint), and a restore passes the option when the images
// hold such connections.

// CRIUTCPEstablished is CRIU's option, as a line of its configuration file.
const CRIUTCPEstablished = "tcp-established"

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

// restoreTCP counts the established TCP connections of the checkpoint in
// dir, logging that the restore keeps them. The directory was read by
// CheckRestore already: an error here leaves the count at zero, and CRIU
// reports what is wrong.
func (o *Orchestrator) restoreTCP(id, dir string) int {
	n, _ := EstablishedTCP(dir)
	if n > 0 {
		o.log().Info("checkpoint holds established TCP connections: restoring with tcp-established", "id", id, "connections", n)
	}
	return n
}
