package runcwrap

import (
	"context"
	"errors"
	"strconv"

	"github.com/cryo-gpu/cryo/internal/interrupt"
	"github.com/cryo-gpu/cryo/internal/report"
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

// The statuses of a lost workload, as the cryo CLI exits with them (its
// ExitLostKept and ExitLost; docs/cli.md, "cryo help interrupted"):
// Podman and CRI-O show a runtime's exit status, and a script must be able
// to tell a lost workload from a failure that left it running.
const (
	exitLostKept = 3 // a process died; a complete checkpoint holds the workload
	exitLost     = 4 // a process died; no complete checkpoint holds it
)

// exitCode is the status cryo-runc exits with for err: 3 or 4 when the
// workload was lost (the fate wins over runc's status, which only says
// how the lost step ended, and over an interrupt: a lost workload must
// not read as a clean rollback), else 128+signal when a signal stopped
// the command and what it had begun was undone (130 for SIGINT, as the
// CLI), else runc's own when runc failed, else 1.
func exitCode(ctx context.Context, err error) int {
	switch report.FateOf(err) {
	case report.FateLostKept:
		return exitLostKept
	case report.FateLost:
		return exitLost
	}
	if sig := interrupt.By(ctx); sig != 0 && err != nil {
		return interrupt.ExitCode(sig)
	}
	var e *exitError
	if errors.As(err, &e) && e.code != 0 {
		return e.code
	}
	return 1
}
