package cuda

import (
	"fmt"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// checkAlive fails with ErrNoProcess when pid is gone or a zombie.
func checkAlive(op string, pid int) error {
	if pid <= 0 {
		return fmt.Errorf("%s: %w: invalid pid", describe(op, pid), ErrNoProcess)
	}
	if procfs.Alive(pid) {
		return nil
	}
	return fmt.Errorf("%s: %w: pid %d has exited; check that the container is still running", describe(op, pid), ErrNoProcess, pid)
}
