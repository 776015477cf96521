package digest

import (
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Sentinel errors; concrete errors wrap them, test with errors.Is. The
// manifest package gives them its own names too: a manifest that cannot be
// read is as corrupt as a file that does not match its digest.
var (
	// ErrCorrupt: a file of the checkpoint is damaged or missing.
	ErrCorrupt = report.Sentinel("checkpoint corrupt", errdefs.ErrDataLoss)
	// ErrIncomplete: the checkpoint's run stopped before its manifest
	// recorded the digests.
	ErrIncomplete = report.Sentinel("checkpoint did not finish", errdefs.ErrDataLoss)
)

// CorruptFileError is an image file whose content does not match its digest,
// or that is missing, or that no digest covers.
type CorruptFileError struct {
	File   string // name inside the image directory
	Reason string // "sha256 mismatch (want …, have …)", "missing", …
}

func (e *CorruptFileError) Error() string { return report.Render(e.Cause(), e.RemedyText()) }

// Cause is the message without the remedy (report.Remedied).
func (e *CorruptFileError) Cause() string {
	return fmt.Sprintf("checkpoint image file %s is corrupt: %s", e.File, e.Reason)
}

// RemedyText is the remedy alone (report.Remedied).
func (e *CorruptFileError) RemedyText() string { return "re-take or re-transfer the checkpoint" }

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptFileError) Unwrap() error { return ErrCorrupt }
