package cli

import (
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
	"github.com/cryo-gpu/cryo/internal/report"
)

// checkBuildSource refuses a source that would build an image nothing can
// restore: a container's CRIU directory (`ctr task checkpoint
// --image-path`) carries a process kind's manifest but no container, and
// its restore would be refused as a container's checkpoint, late, with
// its root at pid 1.
func checkBuildSource(ref string, src *ociimage.Source) error {
	if src.Kind != ociimage.KindProcess {
		return nil
	}
	if err := precheck.ContainerTreeImage(src.CRIU); err != nil {
		pe := err.(*precheck.Error)
		return &report.StepError{Op: "build", ID: ref, Err: err, Remedy: pe.Remedy}
	}
	return nil
}
