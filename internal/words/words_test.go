package words

import (
	"testing"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// A CLI user reads a remedy in the CLI's terms, for every remedy the core
// leaves to the front end (the core's message around it: orchestrate's
// TestFailureMessages). A key the CLI does not word fails here.
func TestRemedyWords(t *testing.T) {
	want := map[report.Key]string{
		criu.RefusedUnixSocket:        "checkpoint the process at the other end of the unix socket in the same tree, or close the socket first",
		criu.RefusedTerminal:          "add --shell-job (and give it at restore too)",
		criu.RefusedTCP:               "for the established TCP connection, checkpoint with `cryo checkpoint --tcp-established`; the restore keeps the connections by itself",
		criu.RefusedFileLock:          "release the file lock before the checkpoint (cryo checkpoint has no flag for CRIU's file-locks)",
		orchestrate.RemedyLockTimeout: "retry with a longer --lock-timeout once the GPU work can pause; if it times out again, run `cryo doctor`",
	}
	testsupport.CheckWording(t, orchestrate.RemedyKeys, Remedies, want)
}
