package imagerestore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containerd/errdefs"
	"oras.land/oras-go/v2/errdef"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

// A registry's "no such image" is marked ErrImageNotFound with the
// message it always had, and its class is NotFound, not the Unavailable of
// the transfer that failed with it.
func TestNotFoundMarksTheImage(t *testing.T) {
	se := &report.StepError{Op: "resolve", ID: "r", Err: fmt.Errorf("r: %w: %w", errdef.ErrNotFound, ociimage.ErrTransfer)}
	got := notFound(se)
	var marked *report.StepError
	if !errors.As(got, &marked) || marked.Err.Error() != se.Err.Error()+": "+ErrImageNotFound.Error() {
		t.Fatalf("marked %v", got)
	}
	if !errors.Is(got, ErrImageNotFound) || !errors.Is(got, ociimage.ErrTransfer) || report.ClassIn(got) != errdefs.ErrNotFound {
		t.Errorf("chain of %v: class %v", got, report.ClassIn(got))
	}
	if other := fmt.Errorf("x: %w", ociimage.ErrTransfer); notFound(other) != other {
		t.Errorf("a failure that is no 'not found' was marked")
	}
}
