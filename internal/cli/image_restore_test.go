package cli

import (
	"errors"
	"testing"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/report"
)

// The CLI shows a failed step's cause as the step reported it, and a work
// directory that could not be made with the way around it.
func TestImageRestoreStepErrors(t *testing.T) {
	cause := report.WithRemedy(errors.New("image store /x does not exist"), "give the --store")
	if err := stepCause(&imagerestore.Failure{Step: imagerestore.StepOpenStore, Err: cause}); err != cause {
		t.Fatalf("stepCause: %v, want the cause itself", err)
	}
	err := unpackError(&imagerestore.Failure{Step: imagerestore.StepWorkDir, Err: errors.New("mkdir: permission denied")})
	var rm report.Remedied
	if !errors.As(err, &rm) || rm.Cause() != "work directory: mkdir: permission denied" || rm.RemedyText() != "pass --dir" {
		t.Fatalf("unpackError: %v", err)
	}
	if err := unpackError(&imagerestore.Failure{Step: imagerestore.StepUnpack, Err: cause}); err != cause {
		t.Fatalf("unpackError of the unpack: %v, want the cause itself", err)
	}
}
