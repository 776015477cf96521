// Package words is the cryo CLI's wording of the remedies each front end
// words its own way (orchestrate.RemedyKeys): the CLI's flags, such as
// --shell-job, are what its user can act on. It lies outside every front
// end so that the CLI and the CRIU action script (internal/criuaction),
// which has always given the CLI's words, share them without one front
// end importing another.
package words

import (
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Remedies are the cryo CLI's words, passed with orchestrate.WithFrontEnd.
var Remedies = report.Wording{
	criu.RefusedTerminal:          "add --shell-job (and give it at restore too)",
	criu.RefusedTCP:               "for the established TCP connection, checkpoint with `cryo checkpoint --tcp-established`; the restore keeps the connections by itself",
	criu.RefusedUnixSocket:        "checkpoint the process at the other end of the unix socket in the same tree, or close the socket first",
	criu.RefusedFileLock:          "release the file lock before the checkpoint (cryo checkpoint has no flag for CRIU's file-locks)",
	orchestrate.RemedyLockTimeout: "retry with a longer --lock-timeout once the GPU work can pause; if it times out again, run `cryo doctor`",
}
