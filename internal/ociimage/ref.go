package ociimage

import (
	"errors"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/report"
	"github.com/distribution/reference"
)

// ErrBadReference: an image name a registry would refuse.
var ErrBadReference = errors.New("not a valid image reference")

// CheckRef refuses, before anything is built, a name that no registry
// takes ("BAD REF"): the store would keep and list it, and only a push,
// long after, would say it cannot be named so.
func CheckRef(ref string) error {
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return &report.StepError{Op: "build", ID: fmt.Sprintf("%q", ref),
			Err:    fmt.Errorf("%w: %v", ErrBadReference, err),
			Remedy: "name the image as a registry would: lowercase [HOST[:PORT]/]PATH[:TAG], e.g. localhost/ckpt/app:v1"}
	}
	return nil
}
