package runcwrap

import (
	"errors"
	"strconv"
)

// Sentinel errors of cryo-runc; messages wrap them with the container, the
// step and the remedy.
var (
	// ErrRuncFailed: the real runc exited non-zero; its own message is in its log.
	ErrRuncFailed = errors.New("runc failed")
	// ErrContainer: runc could not tell cryo about the container.
	ErrContainer = errors.New("container query failed")
)

// exitError carries runc's exit status through the orchestration, so that
// cryo-runc exits with runc's own code when runc is what failed.
type exitError struct{ code int }

func (e *exitError) Error() string { return "runc exited with status " + strconv.Itoa(e.code) }
func (e *exitError) Unwrap() error { return ErrRuncFailed }

// exitCode is the status cryo-runc exits with for err: runc's own when runc
// failed, else 1.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) && e.code != 0 {
		return e.code
	}
	return 1
}
