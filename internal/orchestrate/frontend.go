package orchestrate

import (
	"errors"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/report"
)

// FrontEnd is the tool a user came through, as its words for the keyed
// remedies: `--shell-job` means nothing to a ctr user, and Podman has its
// own flags for what CRIU needs. The core picks the remedy's key; each
// front end keeps its words at its edge (internal/words, the shim's
// and cryo-runc's packages) and passes them with WithFrontEnd. Every front
// end words every key of RemedyKeys, which the test beside each Wording
// checks; the core has no words of its own, so a key left unworded (or no
// front end at all) gives the remedy the failure has without one.
type FrontEnd = report.Wording

// WithFrontEnd gives the words of the front end the orchestration serves,
// for its remedies.
func WithFrontEnd(f FrontEnd) Option { return func(o *Orchestrator) { o.FrontEnd = f } }

// The remedies whose words depend on the front end: a CRIU dump refusal
// the user fixes by asking for an option (each criu refusal is its own
// key: criu.RefusedTerminal and the others), and a driver lock that did
// not return in time. A front end's Wording gives words to every one of
// them.
const RemedyLockTimeout report.Key = "lock-timeout" // the driver's lock did not return in time

// RemedyKeys are the keys a front end words: every refusal CRIU's log can
// show, and the lock timeout.
var RemedyKeys = append(criu.Refusals(), RemedyLockTimeout)

// refusalOf reads CRIU's log behind err for a refusal; "" if none.
func refusalOf(err error) report.Key {
	var ce *CRIUError
	if !errors.As(err, &ce) {
		return ""
	}
	return criu.RefusalIn(ce.LogPath)
}

// worded words k as the front end f does; false if it has no words for k.
func worded(f FrontEnd, k report.Key) (string, bool) {
	w := f[k]
	return w, w != ""
}

// dumpRemedy is the remedy of a failed dump: the front end's option for a
// refusal CRIU explained, else the CRIU log.
func dumpRemedy(f FrontEnd, err error) string {
	if w, ok := worded(f, refusalOf(err)); ok {
		return w
	}
	if r := criu.RemedyOf(err); r != "" {
		return r
	}
	return "read the CRIU log from its first error line, then retry"
}
