package harness

import (
	"errors"
	"os/exec"
)

// ExitCode is the exit status of a finished command's error (0 for nil).
func ExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
