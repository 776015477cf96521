package criuimg

import (
	"errors"
	"fmt"
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

func (e *ImageError) Error() string {
	return fmt.Sprintf("CRIU image %s in %s is corrupt: %s; remedy: re-take or re-transfer the checkpoint", e.File, e.Dir, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *ImageError) Unwrap() error { return ErrCorrupt }
