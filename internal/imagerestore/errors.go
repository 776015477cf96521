package imagerestore

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Sentinel errors; concrete errors wrap them.
var (
	// ErrBadAnnotation: an annotation of cryo's restore has a value cryo
	// cannot use.
	ErrBadAnnotation = report.Sentinel("bad checkpoint annotation", errdefs.ErrInvalidArgument)
	// ErrNotContainerCheckpoint: the image is a checkpoint whose processes
	// did not come from a container (a bare process tree), so there is no
	// container to restore into.
	ErrNotContainerCheckpoint = report.Sentinel("not a container checkpoint", errdefs.ErrInvalidArgument)
	// ErrImageNotFound: the registry has no image under the reference.
	ErrImageNotFound = report.Sentinel("checkpoint image not found", errdefs.ErrNotFound)
	// ErrRestoreOff: the node has not opted in to restores from images
	// that annotations name (config.AnnotationPolicy), or its policy file
	// is unusable.
	ErrRestoreOff = errors.New("restore from an annotation's checkpoint image is off on this node")
	// ErrNotPinned: the annotation names a tag, which can be moved in the
	// registry or on the node, instead of a digest. It is a bad annotation
	// (containerd's InvalidArgument).
	ErrNotPinned = fmt.Errorf("checkpoint image not pinned by digest: %w", ErrBadAnnotation)
	// ErrNotAllowed: the node's policy does not let the pod's namespace
	// restore from that repository (containerd's PermissionDenied).
	ErrNotAllowed = fmt.Errorf("checkpoint image not allowed for the pod's namespace: %w", errdefs.ErrPermissionDenied)
	// ErrDigestMismatch: the image found or fetched is not the one the
	// reference pins (a damaged or substituted store entry): an integrity
	// failure, containerd's DataLoss.
	ErrDigestMismatch = fmt.Errorf("checkpoint image does not match its pinned digest: %w", ociimage.ErrIntegrity)
)
