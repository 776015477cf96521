package runcwrap

import (
	"context"

	"github.com/cryo-gpu/cryo/internal/interrupt"
)

// signalContext is cancelled on SIGINT, SIGTERM and SIGHUP to cryo-runc's
// process group (a terminal's Ctrl-C on `podman container checkpoint`,
// Podman's SIGTERM to its runtime, a closed terminal's SIGHUP), with the
// signal as its cause, so that cryo-runc exits 128+signal as the shells
// and the cryo CLI do.
func signalContext() (context.Context, func()) { return interrupt.Context(nil) }

// completed passes code on, and says so when a signal came but the
// command succeeded all the same: past the point where it could be undone
// (a checkpoint's last write, a restore whose CRIU is done, a resume), a
// command completes, and its caller must not read the signal as a
// rollback.
func (w *wrapper) completed(ctx context.Context, code int) int {
	if sig := interrupt.By(ctx); sig != 0 && code == 0 {
		w.log.warn("%s", interrupt.Completed(sig))
	}
	return code
}
