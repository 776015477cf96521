package imagerestore

import "errors"

// Sentinel errors; concrete errors wrap them.
var (
	// ErrBadAnnotation: an annotation of cryo's restore has a value cryo
	// cannot use.
	ErrBadAnnotation = errors.New("bad checkpoint annotation")
	// ErrNotContainerCheckpoint: the image is a checkpoint whose processes
	// did not come from a container (a bare process tree), so there is no
	// container to restore into.
	ErrNotContainerCheckpoint = errors.New("not a container checkpoint")
	// ErrImageNotFound: the registry has no image under the reference.
	ErrImageNotFound = errors.New("checkpoint image not found")
)
