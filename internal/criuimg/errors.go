package criuimg

import (
	"errors"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Sentinel errors; concrete errors wrap them, test with errors.Is.
var (
	// ErrNotImageDir: the directory holds no CRIU process tree
	// (pstree.img), so it is not a CRIU image directory.
	ErrNotImageDir = errors.New("not a CRIU image directory")
	// ErrCorrupt: a CRIU image is truncated, malformed or not the image
	// its name says.
	ErrCorrupt = errors.New("CRIU image corrupt")
)

// ImageError is one CRIU image that could not be decoded.
type ImageError struct {
	Dir    string // the image directory
	File   string // the image's name in it: "core-42.img"
	Reason string // "truncated: entry 3 needs 120 bytes, 17 left", …
}

func (e *ImageError) Error() string { return report.Render(e.Cause(), e.RemedyText()) }

// Cause is the message without the remedy (report.Remedied).
func (e *ImageError) Cause() string {
	return fmt.Sprintf("CRIU image %s in %s is corrupt: %s", e.File, e.Dir, e.Reason)
}

// RemedyText is the remedy alone (report.Remedied).
func (e *ImageError) RemedyText() string { return "re-take or re-transfer the checkpoint" }

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *ImageError) Unwrap() error { return ErrCorrupt }
