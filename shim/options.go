package shim

import (
	"context"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
)

// runcOptionsOnly keeps the task's options if they are runc options
// (BinaryName, SystemdCgroup, CriuImagePath, …) and drops any other kind.
// containerd's CRI plugin sends its generic runtimeoptions for a runtime
// type it does not know as runc's, and the runc task service would panic
// on them; cryo serves runc's options only.
func runcOptionsOnly(ctx context.Context, r *taskv3.CreateTaskRequest) {
	if r.Options == nil || r.Options.GetValue() == nil {
		return
	}
	if typeurl.Is(r.Options, &options.Options{}) {
		return
	}
	log.G(ctx).WithFields(log.Fields{"id": r.ID, "type": r.Options.GetTypeUrl()}).
		Warn("cryo: ignoring task options that are not runc options (containerd.runc.v1.Options)")
	r.Options = nil
}
