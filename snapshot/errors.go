package snapshot

import (
	"errors"
	"fmt"
)

// Sentinel errors; concrete errors wrap them, test with errors.Is.
var (
	// ErrNotCheckpoint: the directory is not a checkpoint (no CRIU images).
	ErrNotCheckpoint = errors.New("not a checkpoint")
	// ErrNoManifest: the directory has no cryo manifest.
	ErrNoManifest = errors.New("no cryo manifest")
	// ErrCorrupt: a file of the checkpoint is damaged or missing.
	ErrCorrupt = errors.New("checkpoint corrupt")
	// ErrIncomplete: the checkpoint's run stopped before its manifest
	// recorded the digests (see Complete).
	ErrIncomplete = errors.New("checkpoint did not finish")
	// ErrUnsupportedVersion: the manifest comes from a newer cryo.
	ErrUnsupportedVersion = errors.New("unsupported manifest version")
	// ErrIncompatibleHost: this host cannot take the checkpoint.
	ErrIncompatibleHost = errors.New("host cannot restore this checkpoint")
)

// CorruptFileError is an image file whose content does not match its digest,
// or that is missing, or that no digest covers.
type CorruptFileError struct {
	File   string // name inside the image directory
	Reason string // "sha256 mismatch (want …, have …)", "missing", …
}

func (e *CorruptFileError) Error() string {
	return fmt.Sprintf("checkpoint image file %s is corrupt: %s; remedy: re-take or re-transfer the checkpoint", e.File, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptFileError) Unwrap() error { return ErrCorrupt }

// HostError says what a restore needs and what this host offers.
type HostError struct {
	Needs  string // "1× NVIDIA H100 80GB HBM3 (sm_90) with ≥ 9.2 GiB free"
	Offers string // "1× NVIDIA A100 (sm_80)"
	Detail string // optional: the driver mismatch, …
	Err    error  // optional: the matcher's error (cudacr.ErrNoMatchingGPU)
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
