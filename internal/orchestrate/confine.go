package orchestrate

import (
	"context"
	"errors"

	"github.com/cryo-gpu/cryo/internal/confine"
)

// confineToSpec refuses a restore into a container whose checkpoint
// claims a right the container's new spec does not grant: CRIU restores
// credentials, capabilities, seccomp, namespaces, cgroups, mounts and
// /dev from the images, and runc does not re-apply the spec over them.
// A bare process tree (no spec) runs on the host as the user who restores
// it, and the action-script path learns its spec only once CRIU runs.
func (o *Orchestrator) confineToSpec(ctx context.Context, id, dir string, scope GPUScope) error {
	if scope.Spec == nil {
		return nil
	}
	_, err := o.step(ctx, id, StepConfine, func(context.Context) error {
		return confine.Check(dir, scope.Spec)
	})
	if err == nil {
		return nil
	}
	remedy := "restore the checkpoint into a container whose spec grants what the checkpointed container had, " +
		"or checkpoint the workload in a container with the new spec's rights"
	if !errors.Is(err, confine.ErrExceedsSpec) {
		remedy = "the checkpoint's CRIU images cannot be read: take the checkpoint again"
	}
	return &StepError{Op: "restore", ID: id, Step: StepConfine, Err: err, Outcome: "nothing was restored", Remedy: remedy}
}
