package ociimage

import (
	"errors"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Sentinel errors; concrete errors wrap them.
var (
	// ErrNotCheckpointImage: the image is an ordinary image, not a checkpoint.
	ErrNotCheckpointImage = errors.New("not a checkpoint image")
	// ErrUnknownSource: build cannot tell what kind of checkpoint it got.
	ErrUnknownSource = errors.New("unknown checkpoint source")
	// ErrNoSpace: the file system ran out of room while unpacking; the
	// image itself may be fine.
	ErrNoSpace = errors.New("no space left to unpack the checkpoint")
	// ErrIntegrity: a blob or file does not match its digest or size.
	ErrIntegrity = errors.New("checkpoint image failed verification")
	// ErrDecrypt: an encrypted layer could not be decrypted (no or wrong key).
	ErrDecrypt = errors.New("cannot decrypt checkpoint image")
	// ErrNotFound: the reference is not in the local store.
	ErrNotFound = errors.New("image not found")
	// ErrNotRestorable: the checkpoint's kind is one that `cryo image
	// restore` cannot restore by itself (a kubelet checkpoint needs a pod).
	ErrNotRestorable = errors.New("checkpoint kind not restorable here")
	// ErrTransfer: a push or pull failed after its retries.
	ErrTransfer = errors.New("image transfer failed")
)

// StepError is a failure of one operation on one image (Op: "build",
// "push", "pull", "resolve", "unpack"; ID: the reference): cryo's one
// error report.
type StepError = report.StepError

// LayerError is a failure on one layer of an image: it says which, for a
// caller that reports the first bad part (`cryo inspect --verify`); its
// message is its cause's, which names the layer already.
type LayerError struct {
	Digest string
	Err    error
}

func (e *LayerError) Error() string { return e.Err.Error() }

// Unwrap gives errors.Is and errors.As the cause.
func (e *LayerError) Unwrap() error { return e.Err }
