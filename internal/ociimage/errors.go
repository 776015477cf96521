package ociimage

import (
	"errors"

	"github.com/containerd/errdefs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Sentinel errors; concrete errors wrap them.
var (
	// ErrNotCheckpointImage: the image is an ordinary image, not a checkpoint.
	ErrNotCheckpointImage = report.Sentinel("not a checkpoint image", errdefs.ErrInvalidArgument)
	// ErrUnknownSource: build cannot tell what kind of checkpoint it got.
	ErrUnknownSource = errors.New("unknown checkpoint source")
	// ErrNoSpace: the file system ran out of room while unpacking; the
	// image itself may be fine.
	ErrNoSpace = report.Sentinel("no space left to unpack the checkpoint", errdefs.ErrResourceExhausted)
	// ErrIntegrity: a blob or file does not match its digest or size.
	ErrIntegrity = report.Sentinel("checkpoint image failed verification", errdefs.ErrDataLoss)
	// ErrDecrypt: an encrypted layer could not be decrypted (no or wrong key).
	ErrDecrypt = report.Sentinel("cannot decrypt checkpoint image", errdefs.ErrFailedPrecondition)
	// ErrNotFound: the reference is not in the local store.
	ErrNotFound = report.Sentinel("image not found", errdefs.ErrNotFound)
	// ErrNotRestorable: the checkpoint's kind is one that `cryo image
	// restore` cannot restore by itself (a kubelet checkpoint needs a pod).
	ErrNotRestorable = errors.New("checkpoint kind not restorable here")
	// ErrTransfer: a push or pull failed after its retries.
	ErrTransfer = report.Sentinel("image transfer failed", errdefs.ErrUnavailable)
)

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
