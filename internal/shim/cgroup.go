package shim

import (
	"fmt"
	"os"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	cgroupsv2 "github.com/containerd/cgroups/v3/cgroup2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/pkg/shim"
)

// joinShimCgroup honours the runc option ShimCgroup, which containerd sends
// on the stdin of `start`: the serving shim is moved into that cgroup.
func joinShimCgroup(pid int) error {
	opts, err := shim.ReadRuntimeOptions[*options.Options](os.Stdin)
	if err != nil || opts == nil || opts.ShimCgroup == "" {
		return nil
	}
	if cgroups.Mode() == cgroups.Unified {
		cg, err := cgroupsv2.Load(opts.ShimCgroup)
		if err != nil {
			return fmt.Errorf("load shim cgroup %s: %w", opts.ShimCgroup, err)
		}
		return cg.AddProc(uint64(pid))
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(opts.ShimCgroup))
	if err != nil {
		return fmt.Errorf("load shim cgroup %s: %w", opts.ShimCgroup, err)
	}
	return cg.AddProc(uint64(pid))
}
