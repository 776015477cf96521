package outcome

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// readProc reads a /proc file with plain system calls: open, read until
// the end, close. os.ReadFile also stats the file and registers it with
// the runtime's poller, which doubles the cost of the few thousand small
// reads that a tree of a few hundred threads takes.
func readProc(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("outcome: read %s: %w", path, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, cap(buf))...)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("outcome: read %s: %w", path, err)
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}
