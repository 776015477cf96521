package shim

import (
	"context"
	"strings"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/cryo-gpu/cryo/internal/bundle"
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

// systemdCgroupFromSpec sets runc's SystemdCgroup option when the task comes
// without runc options and its spec names a systemd cgroup
// ("slice:prefix:name"), as a kubelet with the systemd cgroup driver asks
// for. containerd's CRI plugin cannot pass runc options to a runtime type it
// does not know, and runc without --systemd-cgroup would read that path as a
// cgroupfs directory and fail.
func systemdCgroupFromSpec(ctx context.Context, r *taskv3.CreateTaskRequest) {
	if r.Options != nil && r.Options.GetValue() != nil {
		return
	}
	cgroupsPath, ok := bundle.CgroupsPath(r.Bundle)
	if !ok || !isSystemdCgroupPath(cgroupsPath) {
		return
	}
	a, err := typeurl.MarshalAny(&options.Options{SystemdCgroup: true})
	if err != nil {
		return
	}
	r.Options = &anypb.Any{TypeUrl: a.GetTypeUrl(), Value: a.GetValue()}
	log.G(ctx).WithFields(log.Fields{"id": r.ID, "cgroupsPath": cgroupsPath}).
		Info("cryo: systemd cgroup path: using runc's systemd cgroup driver")
}

// isSystemdCgroupPath reports whether p has runc's systemd form
// "slice:prefix:name" (the slice may be empty) rather than a cgroupfs path,
// which is absolute or relative and has no colons.
func isSystemdCgroupPath(p string) bool {
	parts := strings.Split(p, ":")
	return len(parts) == 3 && !strings.HasPrefix(p, "/") && parts[2] != ""
}
