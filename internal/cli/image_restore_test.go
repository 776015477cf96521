package cli

import (
	"errors"
	"strings"
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

// image restore -q narrates nothing: the containerd restore's steps
// ("creating container …", "unpacking base image …") are dropped, its
// warnings kept, and without -q every line is printed.
func TestRestoreLogQuiet(t *testing.T) {
	var b strings.Builder
	logf := restoreLog(&b, true)
	logf("creating container %s", "c1")
	logf("unpacking base image %s", "app:v1")
	logf("warning: base image %s is %s here", "app:v1", "sha256:ab")
	if got := b.String(); got != "warning: base image app:v1 is sha256:ab here\n" {
		t.Fatalf("-q: %q, want the warning alone", got)
	}
	b.Reset()
	restoreLog(&b, false)("creating container %s", "c1")
	if b.String() != "creating container c1\n" {
		t.Fatalf("without -q: %q", b.String())
	}
}
