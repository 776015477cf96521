package fixup

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/criuimg"
)

// A process that closes a connection first leaves a TIME_WAIT socket on its
// local port for 60 s (FIN_WAIT2 while the peer has not closed yet): a
// socket the kernel keeps after the process is gone. When that port is a listening port of the process
// (a server closing an accepted connection, NCCL's and PyTorch's bootstrap
// listeners), Linux refuses to bind a new listener to it until the
// TIME_WAIT expires, unless the listener had SO_REUSEADDR (which its
// accepted connections inherit); CRIU's SO_REUSEADDR on the restored socket
// does not help. So a restore on the
// same host, in the same network namespace, soon after the checkpoint fails
// with "Can't bind inet socket: Address already in use". cryo waits for
// those TIME_WAIT sockets to expire instead (at most a minute), and says so
// (the orchestration's ports step).

const (
	tcpListen = 10 // TCP_LISTEN in CRIU's images
	userHZ    = 100
	// TimeWaitMax bounds the wait: TIME_WAIT lasts 60 s on Linux.
	TimeWaitMax = 65 * time.Second
)

// ListeningPorts are the TCP ports that the checkpoint's listening sockets
// without SO_REUSEADDR bind, from CRIU's files.img.
func ListeningPorts(dir string) (map[uint32]bool, error) {
	files, err := criuimg.Files(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the sockets of %s: %w", filepath.Join(dir, "files.img"), err)
	}
	ports := map[uint32]bool{}
	for _, fe := range files {
		if fe.GetIsk() == nil {
			continue
		}
		// The kernel lets a listener with SO_REUSEADDR bind next to the
		// TIME_WAIT sockets of the connections it accepted (they inherit
		// the option), so only listeners without it have to wait.
		if sk := fe.GetIsk(); sk.GetState() == tcpListen && sk.GetSrcPort() != 0 && !sk.GetOpts().GetReuseaddr() {
			ports[sk.GetSrcPort()] = true
		}
	}
	return ports, nil
}

// TimeWaitOn lists the ports among ports that TIME_WAIT sockets of this
// network namespace hold, and the longest time one of them has left.
func TimeWaitOn(ports map[uint32]bool) ([]uint32, time.Duration) {
	held := map[uint32]bool{}
	var left time.Duration
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			port, l, ok := timeWaitLine(sc.Text())
			if ok && ports[port] {
				held[port] = true
				left = max(left, l)
			}
		}
		f.Close()
	}
	list := make([]uint32, 0, len(held))
	for p := range held {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool { return list[i] < list[j] })
	return list, left
}

// closingStates are the states of a connection that the kernel finishes
// after its process has closed it: FIN_WAIT1, FIN_WAIT2, TIME_WAIT, CLOSE,
// LAST_ACK and CLOSING.
var closingStates = map[uint64]bool{4: true, 5: true, 6: true, 7: true, 9: true, 11: true}

// timeWaitLine parses one line of /proc/net/tcp{,6} ("sl local rem st
// tx:rx tr:when retr uid timeout inode ..."): for a socket no process holds
// any more (inode 0) in a closing state, its local port and the time its
// timer has left (when, in clock ticks).
func timeWaitLine(line string) (uint32, time.Duration, bool) {
	f := strings.Fields(line)
	if len(f) < 10 || f[9] != "0" {
		return 0, 0, false
	}
	st, err := strconv.ParseUint(f[3], 16, 8)
	if err != nil || !closingStates[st] {
		return 0, 0, false
	}
	_, portHex, ok := strings.Cut(f[1], ":")
	port, err := strconv.ParseUint(portHex, 16, 16)
	if !ok || err != nil {
		return 0, 0, false
	}
	_, whenHex, _ := strings.Cut(f[5], ":")
	when, _ := strconv.ParseUint(whenHex, 16, 32)
	return uint32(port), time.Duration(when) * time.Second / userHZ, true
}
