package orchestrate

import (
	"context"
	"errors"

	"github.com/cryo-gpu/cryo/internal/confine"
	"github.com/cryo-gpu/cryo/internal/report"
)

// confineStep is the step of a restore's check that refuses a restore into a container whose checkpoint
// claims a right the container's new spec does not grant: CRIU restores
// credentials, capabilities, seccomp, namespaces, cgroups, mounts and
// /dev from the images, and runc does not re-apply the spec over them.
// A bare process tree (no spec) runs on the host as the user who restores
// it, and the action-script path learns its spec only once CRIU runs: the
// step is skipped without a spec.
func confineStep(dir string, scope GPUScope) step {
	// Asked once, as the table is built: the skip itself reads nothing.
	off := scope.Spec == nil || skipConfine()
	return step{name: StepConfine,
		skip: func() bool { return off },
		do:   func(context.Context) error { return confine.Check(dir, scope.Spec) }}
}

// confineError is the failed confine step's error.
func confineError(id string, err error) error {
	remedy := "restore the checkpoint into a container whose spec grants what the checkpointed container had, " +
		"or checkpoint the workload in a container with the new spec's rights"
	if !errors.Is(err, confine.ErrExceedsSpec) {
		remedy = "the checkpoint's CRIU images cannot be read: take the checkpoint again"
	}
	return &report.StepError{Op: "restore", ID: id, Step: StepConfine, Err: err, Outcome: "nothing was restored", Remedy: remedy}
}
