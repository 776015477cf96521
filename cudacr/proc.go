package cudacr

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// checkAlive fails with ErrNoProcess when pid is gone or a zombie.
func checkAlive(op string, pid int) error {
	if pid <= 0 {
		return fmt.Errorf("%s: %w: invalid pid", describe(op, pid), ErrNoProcess)
	}
	if alive(pid) {
		return nil
	}
	return fmt.Errorf("%s: %w: pid %d has exited; check that the container is still running", describe(op, pid), ErrNoProcess, pid)
}

// alive reports whether pid exists and has not exited (zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold spaces or parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}
