package orchestrate

import (
	"errors"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
)

// FrontEnd is the tool a user came through, as its words for the keyed
// remedies: `--shell-job` means nothing to a ctr user, and Podman has its
// own flags for what CRIU needs. The core picks the remedy's key; each
// front end keeps its words in its own package (the shim's, cryo-runc's)
// and passes them with WithFrontEnd. Nil: the cryo CLI's words (cliWords).
type FrontEnd = report.Wording

// WithFrontEnd gives the words of the front end the orchestration serves,
// for its remedies.
func WithFrontEnd(f FrontEnd) Option { return func(o *Orchestrator) { o.FrontEnd = f } }

// The remedies whose words depend on the front end: a CRIU dump refusal
// the user fixes by asking for an option, and a driver lock that did not
// return in time. A front end's Wording gives words to every one of them.
const (
	RemedyTerminal    report.Key = "terminal"        // the tree is attached to a terminal
	RemedyTCP         report.Key = "tcp-established" // an established TCP connection
	RemedyUnixSocket  report.Key = "ext-unix-sk"     // a unix socket to a process outside the tree
	RemedyFileLock    report.Key = "file-locks"      // a held file lock
	RemedyLockTimeout report.Key = "lock-timeout"    // the driver's lock did not return in time
)

// RemedyKeys are the keys a front end words.
var RemedyKeys = []report.Key{RemedyTerminal, RemedyTCP, RemedyUnixSocket, RemedyFileLock, RemedyLockTimeout}

// cliWords are the cryo CLI's. They stay with the core: the CLI's flags
// are the Orchestrator's own options, and the callers that name no front
// end (the CLI, the CRIU action script) have always been given them.
var cliWords = report.Wording{
	RemedyTerminal:    "add --shell-job (and give it at restore too)",
	RemedyTCP:         "for the established TCP connection, checkpoint with `cryo checkpoint --tcp-established`; the restore keeps the connections by itself",
	RemedyUnixSocket:  "checkpoint the process at the other end of the unix socket in the same tree, or close the socket first",
	RemedyFileLock:    "release the file lock before the checkpoint (cryo checkpoint has no flag for CRIU's file-locks)",
	RemedyLockTimeout: "retry with a longer --lock-timeout once the GPU work can pause; if it times out again, run `cryo doctor`",
}

// refusals map a line of CRIU's log to the remedy of the refusal it shows.
var refusals = []struct {
	line string
	key  report.Key
}{
	{"Task attached to shell terminal", RemedyTerminal},
	{"Found dangling tty", RemedyTerminal},
	{"is not a session leader", RemedyTerminal},
	{"Connected TCP socket", RemedyTCP},
	{"External socket is used", RemedyUnixSocket},
	{"Can't dump half of stream unix connection", RemedyUnixSocket},
	{"file locks are hold without", RemedyFileLock},
	{"Some file locks are hold", RemedyFileLock},
}

// refusalOf reads CRIU's log behind err for a refusal; "" if none.
func refusalOf(err error) report.Key {
	var ce *CRIUError
	if !errors.As(err, &ce) {
		return ""
	}
	log := logLines(ce.LogPath)
	for _, r := range refusals {
		if strings.Contains(log, r.line) {
			return r.key
		}
	}
	return ""
}

// remedy words k as the front end does; the CLI's words where the front
// end has none.
func (o *Orchestrator) remedy(k report.Key) string {
	if w, ok := o.FrontEnd[k]; ok {
		return w
	}
	return cliWords[k]
}

// dumpRemedy is the remedy of a failed dump: the front end's option for a
// refusal CRIU explained, else the CRIU log.
func (o *Orchestrator) dumpRemedy(err error) string {
	if k := refusalOf(err); k != "" {
		return o.remedy(k)
	}
	return "read the CRIU log from its first error line, then retry"
}
