package shim

import (
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// remedies are the shim's words for the remedies each front end words its
// own way. Its users come through ctr or the kubelet, which have no flag
// for most of what CRIU needs: the fix is a runc checkpoint option, a
// line of runc.conf, or the container's own settings.
var remedies = report.Wording{
	criu.RefusedTerminal:          "run the container without a terminal (no `ctr run -t`, no `tty: true`): containerd then gives it pipes, which CRIU dumps",
	criu.RefusedTCP:               "for the established TCP connection, set open_tcp in the runc checkpoint options (CheckpointOptions.OpenTcp; ctr has no flag for it: add the line tcp-established to /etc/criu/runc.conf instead); the restore keeps the connections by itself",
	criu.RefusedUnixSocket:        "add the line ext-unix-sk to /etc/criu/runc.conf (ctr has no flag for it), then checkpoint again",
	criu.RefusedFileLock:          "add the line file-locks to /etc/criu/runc.conf (ctr has no flag for it), then checkpoint again",
	orchestrate.RemedyLockTimeout: "retry the checkpoint (ctr task checkpoint) when the container's GPU work can pause; if it times out again, run `cryo doctor` on the node",
}
