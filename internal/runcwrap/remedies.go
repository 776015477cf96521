package runcwrap

import (
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// remedies are cryo-runc's words for the remedies each front end words its
// own way. Its users come through Podman, whose checkpoint has flags for
// some of what CRIU needs and none for the rest (a line of runc.conf).
var remedies = report.Wording{
	criu.RefusedTerminal:          "run the container without a terminal (no `podman run -t`): Podman then gives it pipes, which CRIU dumps",
	criu.RefusedTCP:               "for the established TCP connection, checkpoint with `podman container checkpoint --tcp-established` (and restore with it too)",
	criu.RefusedUnixSocket:        "checkpoint with `runc checkpoint --ext-unix-sk` semantics: add the line ext-unix-sk to /etc/criu/runc.conf (Podman has no flag for it)",
	criu.RefusedFileLock:          "checkpoint with `podman container checkpoint --file-locks`",
	orchestrate.RemedyLockTimeout: "retry the checkpoint (podman container checkpoint) when the container's GPU work can pause; if it times out again, run `cryo doctor` on the host",
}
