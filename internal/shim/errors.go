package shim

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/grpc/status"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/imagetrust"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// classes gives cryo's sentinel errors containerd's error classes, so that
// containerd, the kubelet and `ctr` see what kind of failure it is (a busy
// target can be retried, a host that lacks the GPUs cannot) instead of
// Unknown. The first class that matches wins. It is the shim's one map
// from cryo's errors to classes: every reply goes through toGRPC, and the
// only class given elsewhere is toGRPC's fallback for refused restores.
var classes = []struct {
	sentinel error
	class    error
}{
	{lock.ErrBusy, errdefs.ErrUnavailable},
	{cuda.ErrTimeout, context.DeadlineExceeded},
	{cuda.ErrNoProcess, errdefs.ErrNotFound},
	{orchestrate.ErrNoProcess, errdefs.ErrNotFound},
	{cuda.ErrLibraryNotFound, errdefs.ErrFailedPrecondition},
	{cuda.ErrNoCheckpointAPI, errdefs.ErrFailedPrecondition},
	{cuda.ErrBadState, errdefs.ErrFailedPrecondition},
	{orchestrate.ErrNoCRIU, errdefs.ErrFailedPrecondition},
	{orchestrate.ErrDirInUse, errdefs.ErrAlreadyExists},
	{orchestrate.ErrDirNotEmpty, errdefs.ErrAlreadyExists},
	{manifest.ErrIncompatibleHost, errdefs.ErrFailedPrecondition},
	{manifest.ErrUnsupportedVersion, errdefs.ErrNotImplemented},
	{manifest.ErrIncomplete, errdefs.ErrDataLoss},
	{manifest.ErrCorrupt, errdefs.ErrDataLoss},
	{manifest.ErrNoManifest, errdefs.ErrInvalidArgument},
	{manifest.ErrNotCheckpoint, errdefs.ErrInvalidArgument},
	// A restore from a checkpoint image (image.go).
	{imagerestore.ErrImageNotFound, errdefs.ErrNotFound},
	{ociimage.ErrNoSpace, errdefs.ErrResourceExhausted},
	// An image beyond the node's unpack caps (CRYO_UNPACK_MAX_*), and a
	// restore past its deadline (CRYO_RESTORE_TIMEOUT).
	{ociimage.ErrUnpackLimit, errdefs.ErrResourceExhausted},
	{orchestrate.ErrRestoreDeadline, context.DeadlineExceeded},
	{ociimage.ErrIntegrity, errdefs.ErrDataLoss},
	{ociimage.ErrPartsMismatch, errdefs.ErrFailedPrecondition},
	{ociimage.ErrPartsUnbound, errdefs.ErrFailedPrecondition},
	{ErrImageMismatch, errdefs.ErrFailedPrecondition},
	{ociimage.ErrDecrypt, errdefs.ErrFailedPrecondition},
	{ociimage.ErrNotCheckpointImage, errdefs.ErrInvalidArgument},
	{ociimage.ErrNotFound, errdefs.ErrNotFound},
	{ociimage.ErrTransfer, errdefs.ErrUnavailable},
	{imagerestore.ErrNotContainerCheckpoint, errdefs.ErrInvalidArgument},
	{imagerestore.ErrBadAnnotation, errdefs.ErrInvalidArgument},
	// These two wrap their class where they are defined, since the image
	// commands report them to containerd's clients too; listed so that
	// the table names every class the shim gives.
	{imagerestore.ErrNotAllowed, errdefs.ErrPermissionDenied},
	{imagetrust.ErrNotTrusted, errdefs.ErrPermissionDenied},
}

// classify wraps err with its containerd class, unless it has one.
func classify(err error) error {
	if errdefs.Resolve(err) != errdefs.ErrUnknown {
		return err
	}
	for _, c := range classes {
		if errors.Is(err, c.sentinel) {
			return fmt.Errorf("%w: %w", c.class, err)
		}
	}
	return err
}

// toGRPC converts an error once, at the API edge: cryo's sentinels get
// their containerd class (classes); the rest become FailedPrecondition for
// restore checks and Unknown otherwise, with the message intact.
func toGRPC(err error, precondition bool) error {
	if err == nil {
		return nil
	}
	err = classify(err)
	if precondition && errdefs.Resolve(err) == errdefs.ErrUnknown {
		err = fmt.Errorf("%w: %w", errdefs.ErrFailedPrecondition, err)
	}
	return messageOnly(errgrpc.ToGRPC(err))
}

// messageOnly drops the status details errgrpc attaches for each error of
// a multi-error chain (a manifest.HostError wraps ErrIncompatibleHost and
// the matcher's ErrNoMatchingGPU): containerd's client joins them to the
// message, which then ended with "host cannot restore this checkpoint" and
// "no matching GPU" again after cryo's full report. The code keeps the
// class; the message is the whole report, once.
func messageOnly(err error) error {
	s, ok := status.FromError(err)
	if !ok || len(s.Details()) == 0 {
		return err
	}
	return status.New(s.Code(), s.Message()).Err()
}
