package shim

import (
	"testing"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// A ctr user reads a remedy in ctr's terms, for every remedy the core
// leaves to the front end (the core's message around it: orchestrate's
// TestFailureMessages).
func TestRemedyWords(t *testing.T) {
	want := map[report.Key]string{
		criu.RefusedUnixSocket:        "add the line ext-unix-sk to /etc/criu/runc.conf (ctr has no flag for it), then checkpoint again",
		criu.RefusedTerminal:          "run the container without a terminal (no `ctr run -t`, no `tty: true`): containerd then gives it pipes, which CRIU dumps",
		criu.RefusedTCP:               "for the established TCP connection, set open_tcp in the runc checkpoint options (CheckpointOptions.OpenTcp; ctr has no flag for it: add the line tcp-established to /etc/criu/runc.conf instead); the restore keeps the connections by itself",
		criu.RefusedFileLock:          "add the line file-locks to /etc/criu/runc.conf (ctr has no flag for it), then checkpoint again",
		orchestrate.RemedyLockTimeout: "retry the checkpoint (ctr task checkpoint) when the container's GPU work can pause; if it times out again, run `cryo doctor` on the node",
	}
	testsupport.CheckWording(t, orchestrate.RemedyKeys, remedies, want)
}
