package orchestrate

import (
	"errors"
	"strings"
)

// FrontEnd is the tool a user came through. A remedy must name what that
// tool offers: `--shell-job` means nothing to a ctr user, and Podman has
// its own flags for what CRIU needs.
type FrontEnd string

// The front ends of the orchestration.
const (
	FrontEndCLI  FrontEnd = "cli"  // cryo checkpoint / cryo restore (the default)
	FrontEndShim FrontEnd = "shim" // containerd: ctr, the kubelet through CRI
	FrontEndRunc FrontEnd = "runc" // cryo-runc: Podman, CRI-O, anything that runs an OCI runtime
)

// WithFrontEnd says which front end the orchestration serves, for the
// wording of its remedies.
func WithFrontEnd(f FrontEnd) Option { return func(o *Orchestrator) { o.FrontEnd = f } }

// dumpRefusal is a kind of CRIU dump failure that the user fixes by asking
// for an option, each front end its own way.
type dumpRefusal int

const (
	refusedNone dumpRefusal = iota
	refusedTerminal
	refusedTCP
	refusedUnixSocket
	refusedFileLock
)

// refusals map a line of CRIU's log to the refusal it shows.
var refusals = []struct {
	line string
	kind dumpRefusal
}{
	{"Task attached to shell terminal", refusedTerminal},
	{"Found dangling tty", refusedTerminal},
	{"is not a session leader", refusedTerminal},
	{"Connected TCP socket", refusedTCP},
	{"External socket is used", refusedUnixSocket},
	{"Can't dump half of stream unix connection", refusedUnixSocket},
	{"file locks are hold without", refusedFileLock},
	{"Some file locks are hold", refusedFileLock},
}

// refusalOf reads CRIU's log behind err for a refusal; refusedNone if none.
func refusalOf(err error) dumpRefusal {
	var ce *CRIUError
	if !errors.As(err, &ce) {
		return refusedNone
	}
	log := logLines(ce.LogPath)
	for _, r := range refusals {
		if strings.Contains(log, r.line) {
			return r.kind
		}
	}
	return refusedNone
}

// refusalRemedies: one remedy per refusal and front end.
var refusalRemedies = map[dumpRefusal]map[FrontEnd]string{
	refusedTerminal: {
		FrontEndCLI:  "add --shell-job (and give it at restore too)",
		FrontEndShim: "run the container without a terminal (no `ctr run -t`, no `tty: true`): containerd then gives it pipes, which CRIU dumps",
		FrontEndRunc: "run the container without a terminal (no `podman run -t`): Podman then gives it pipes, which CRIU dumps",
	},
	refusedTCP: {
		FrontEndCLI:  "for the established TCP connection, checkpoint with `cryo checkpoint --tcp-established`; the restore keeps the connections by itself",
		FrontEndShim: "for the established TCP connection, set open_tcp in the runc checkpoint options (CheckpointOptions.OpenTcp; ctr has no flag for it: add the line tcp-established to /etc/criu/runc.conf instead); the restore keeps the connections by itself",
		FrontEndRunc: "for the established TCP connection, checkpoint with `podman container checkpoint --tcp-established` (and restore with it too)",
	},
	refusedUnixSocket: {
		FrontEndCLI:  "checkpoint the process at the other end of the unix socket in the same tree, or close the socket first",
		FrontEndShim: "add the line ext-unix-sk to /etc/criu/runc.conf (ctr has no flag for it), then checkpoint again",
		FrontEndRunc: "checkpoint with `runc checkpoint --ext-unix-sk` semantics: add the line ext-unix-sk to /etc/criu/runc.conf (Podman has no flag for it)",
	},
	refusedFileLock: {
		FrontEndCLI:  "release the file lock before the checkpoint (cryo checkpoint has no flag for CRIU's file-locks)",
		FrontEndShim: "add the line file-locks to /etc/criu/runc.conf (ctr has no flag for it), then checkpoint again",
		FrontEndRunc: "checkpoint with `podman container checkpoint --file-locks`",
	},
}

// frontEnd is o's front end; the CLI when unset.
func (o *Orchestrator) frontEnd() FrontEnd {
	if o.FrontEnd == "" {
		return FrontEndCLI
	}
	return o.FrontEnd
}

// dumpRemedy is the remedy of a failed dump: the front end's option for a
// refusal CRIU explained, else the CRIU log.
func (o *Orchestrator) dumpRemedy(err error) string {
	k := refusalOf(err)
	if r, ok := refusalRemedies[k][o.frontEnd()]; ok {
		return r
	}
	return "read the CRIU log from its first error line, then retry"
}
