package runcwrap

import (
	"testing"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// A Podman user reads a remedy in Podman's terms, for every remedy the
// core leaves to the front end (the core's message around it:
// orchestrate's TestFailureMessages).
func TestRemedyWords(t *testing.T) {
	want := map[report.Key]string{
		criu.RefusedUnixSocket:        "checkpoint with `runc checkpoint --ext-unix-sk` semantics: add the line ext-unix-sk to /etc/criu/runc.conf (Podman has no flag for it)",
		criu.RefusedTerminal:          "run the container without a terminal (no `podman run -t`): Podman then gives it pipes, which CRIU dumps",
		criu.RefusedTCP:               "for the established TCP connection, checkpoint with `podman container checkpoint --tcp-established` (and restore with it too)",
		criu.RefusedFileLock:          "checkpoint with `podman container checkpoint --file-locks`",
		orchestrate.RemedyLockTimeout: "retry the checkpoint (podman container checkpoint) when the container's GPU work can pause; if it times out again, run `cryo doctor` on the host",
	}
	testsupport.CheckWording(t, orchestrate.RemedyKeys, remedies, want)
}
