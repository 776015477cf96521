package manifest

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Sentinel errors; concrete errors wrap them, test with errors.Is.
var (
	// ErrNotCheckpoint: the directory is not a checkpoint (no CRIU images).
	ErrNotCheckpoint = report.Sentinel("not a checkpoint", errdefs.ErrInvalidArgument)
	// ErrNoManifest: the directory has no cryo manifest.
	ErrNoManifest = report.Sentinel("no cryo manifest", errdefs.ErrInvalidArgument)
	// ErrCorrupt: a file of the checkpoint is damaged or missing, or its
	// manifest unreadable. The digest package's, so that one errors.Is
	// covers a failed verification too.
	ErrCorrupt = digest.ErrCorrupt
	// ErrIncomplete: the checkpoint's run stopped before its manifest
	// recorded the digests (see Complete).
	ErrIncomplete = digest.ErrIncomplete
	// ErrManifestInconsistent: the manifest contradicts itself (CUDA
	// processes whose GPUs its needs do not cover). It wraps ErrCorrupt: a
	// manifest that cannot be believed is as bad as one that cannot be read.
	ErrManifestInconsistent = fmt.Errorf("manifest inconsistent with itself: %w", ErrCorrupt)
	// ErrUnsupportedVersion: the manifest comes from a newer cryo.
	ErrUnsupportedVersion = report.Sentinel("unsupported manifest version", errdefs.ErrNotImplemented)
	// ErrPartial: the directory holds what is left of a checkpoint that
	// failed while its processes ran on (MarkPartial).
	ErrPartial = errors.New("partial checkpoint")
	// ErrIncompatibleHost: this host cannot take the checkpoint.
	ErrIncompatibleHost = report.Sentinel("host cannot restore this checkpoint", errdefs.ErrFailedPrecondition)
)

// HostError says what a restore needs and what this host offers.
type HostError struct {
	Needs  string // "1× NVIDIA H100 80GB HBM3 (sm_90) with ≥ 9.2 GiB free"
	Offers string // "1× NVIDIA A100 (sm_80)"
	Detail string // optional: the driver mismatch, …
	Err    error  // optional: the matcher's error (cuda.ErrNoMatchingGPU)
}

func (e *HostError) Error() string {
	if e.Detail != "" {
		return e.Detail
	}
	return fmt.Sprintf("restore needs %s; this host offers %s", e.Needs, e.Offers)
}

// Unwrap makes errors.Is(err, ErrIncompatibleHost) true, and the
// matcher's own error reachable.
func (e *HostError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrIncompatibleHost, e.Err}
	}
	return []error{ErrIncompatibleHost}
}
