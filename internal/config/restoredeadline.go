package config

import (
	"context"
	"time"

	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrRestoreDeadline is a restore that did not finish within its deadline
// (CRYO_RESTORE_TIMEOUT): the fetch, the unpack, CRIU or the CUDA resume
// took longer, because the checkpoint is bigger than the bound allows for
// or something hung. It is the cause of the restore's context when the
// deadline passes, so that every step below the front end can tell it.
var ErrRestoreDeadline = report.Sentinel("the restore did not finish in time", context.DeadlineExceeded)

// DefaultKubernetesRestoreTime is the whole restore's deadline for a
// container of a pod (a CRI container) when CRYO_RESTORE_TIMEOUT is
// unset. containerd's CRI runs the shim's Create (the unpack) and Start
// (CRIU, the CUDA resume) inside one StartContainer call, which the
// kubelet gives up on after --runtime-request-timeout (2 minutes by
// default). Ending before it leaves the kubelet cryo's own error, with
// nothing of the restore left, instead of a timeout of its own while the
// restore goes on behind it (see docs/kubernetes.md, "Restore deadlines").
const DefaultKubernetesRestoreTime = 100 * time.Second

// RestoreDeadlineRemedy is the remedy of a restore cut off at its deadline.
const RestoreDeadlineRemedy = "if the checkpoint is that large (CRIU reads a few GiB a second), raise " + EnvRestoreTimeout +
	" (on Kubernetes, in containerd's environment, with the kubelet's --runtime-request-timeout above it); otherwise a step hung on it: do not restore this checkpoint again"

// RestoreLimit is the deadline of a whole restore: CRYO_RESTORE_TIMEOUT
// when set, else DefaultKubernetesRestoreTime for a pod's container
// (kubernetes) and DefaultRestoreTime for anything else.
func (c Config) RestoreLimit(kubernetes bool) time.Duration {
	switch {
	case c.RestoreTimeoutSet:
		return c.RestoreTimeout
	case kubernetes:
		return DefaultKubernetesRestoreTime
	}
	return DefaultRestoreTime
}
