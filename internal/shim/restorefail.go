package shim

import (
	"context"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/process"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/runc"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	gorunc "github.com/containerd/go-runc"
	"github.com/containerd/log"

	"github.com/cryo-gpu/cryo/internal/leftovers"
)

// restoreRemoved is what a failed restore's error says became of the
// container once removeFailedRestore has run.
const restoreRemoved = "the container was removed (CRIU, the processes it restored, runc's state, mounts and cgroups)"

// failedRestoreCleanup is the clean-up of a restore whose `runc restore`
// failed: at the restore's deadline the runc service's Start killed runc
// (its context ended), which leaves CRIU running in the container's
// cgroups, runc's state directory with its bind mount of the rootfs, and
// the cgroups; a crashed CRIU can leave restored processes. The runc
// service's own Delete then finds no runc container and unmounts the
// rootfs, as after any failed start. The runc client is the one the runc
// service makes from the task's options, so that root and cgroup driver
// are the same. It returns nil, and no outcome, where the task's id is in
// use before runc runs: what holds it is not the restore's to remove.
func (s *service) failedRestoreCleanup(ctx context.Context, id string, pending pendingRestore) (func(context.Context) error, string) {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, ""
	}
	opts, err := runc.ReadOptions(pending.bundle)
	if err != nil || opts == nil {
		opts = &options.Options{}
	}
	rc := process.NewRunc(opts.Root, pending.bundle, ns, opts.BinaryName, opts.SystemdCgroup)
	c := leftovers.RuncContainer{
		ID: id, Root: rc.Root, Cgroup: pending.scope.Cgroup,
		Delete: func(ctx context.Context) error { return rc.Delete(ctx, id, &gorunc.DeleteOpts{Force: true}) },
	}
	if c.InUse() {
		log.G(ctx).WithField("id", id).Warn("cryo: runc state or cgroup processes of this id exist before the restore: a failed restore will not remove them")
		return nil, ""
	}
	return func(ctx context.Context) error { return leftovers.Remove(ctx, c) }, restoreRemoved
}
