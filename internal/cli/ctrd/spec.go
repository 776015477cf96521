package ctrd

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

// A checkpoint carries memory and files, never rights. The spec it holds
// (spec.dump) came with the image, and whoever built the image wrote it:
// its hooks would run on the host as root when the runtime creates the
// container, and its mounts, devices, capabilities, namespaces, user,
// seccomp and LSM labels, sysctls, rlimits, cgroup path and annotations
// would decide what the container may reach. So the restored container's
// spec is made as `ctr run` makes a new container's: containerd's default
// spec and devices, the base image's config, and the user's flags. From
// the checkpoint's spec only what grants nothing is read (see carried).

// carried is what a restore takes from the checkpoint's spec.
type carried struct {
	// terminal: CRIU restores the process's terminal only into a task
	// that has one, so the new spec must say the same.
	terminal bool
	// args stand in when the base image names no command: runc refuses a
	// spec without one, and a restore never runs it (CRIU brings the
	// process back from its memory); a later `ctr task start` would run
	// it under the new spec's rights, like any command of that image.
	args []string
	// gpuNames are the names of the GPU nodes it ran with (nvidia1): the
	// restore gives it this host's nodes of those names, never the
	// recorded device entries.
	gpuNames []string
}

// readCarried reads spec.dump of the checkpoint unpacked in dir.
func readCarried(dir string) (carried, error) {
	var s specs.Spec
	if err := readJSONFile(filepath.Join(dir, ociimage.SpecDumpName), &s); err != nil {
		return carried{}, fmt.Errorf("spec of the checkpoint: %w", err)
	}
	var c carried
	if s.Process != nil {
		c.terminal, c.args = s.Process.Terminal, s.Process.Args
	}
	if s.Linux != nil {
		for _, d := range s.Linux.Devices {
			if _, ok := cuda.NodeMinor(d.Path); ok && !slices.Contains(c.gpuNames, filepath.Base(d.Path)) {
				c.gpuNames = append(c.gpuNames, filepath.Base(d.Path))
			}
		}
	}
	return c, nil
}

// grants are what the user's flags give the restored container.
type grants struct {
	mounts  []specs.Mount
	netHost bool
}

// specOpts build the new container's spec of base image img on
// containerd's default one (client.WithNewSpec): what `ctr run IMAGE`
// would give it, plus the checkpoint's terminal, the user's grants and the
// GPU nodes.
func specOpts(c carried, g grants, gpus []specs.LinuxDevice) func(img client.Image) []oci.SpecOpts {
	return func(img client.Image) []oci.SpecOpts {
		opts := []oci.SpecOpts{oci.WithDefaultUnixDevices, oci.WithImageConfig(img), withArgsFallback(img.Name(), c.args)}
		if c.terminal {
			opts = append(opts, oci.WithTTY)
		}
		if g.netHost {
			opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostHostsFile, oci.WithHostResolvconf)
		}
		if len(g.mounts) > 0 {
			opts = append(opts, oci.WithMounts(g.mounts))
		}
		if len(gpus) > 0 {
			opts = append(opts, withGPUs(gpus))
		}
		return opts
	}
}

// withArgsFallback gives the process the recorded command line when the
// base image names none (see carried.args).
func withArgsFallback(image string, args []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Process != nil && len(s.Process.Args) == 0 {
			s.Process.Args = args
		}
		if s.Process == nil || len(s.Process.Args) == 0 {
			return report.WithRemedy(fmt.Errorf("base image %s names no command (Entrypoint, Cmd) and the checkpoint records none: %w", image, ErrBaseImage), "restore onto an image that names one")
		}
		return nil
	}
}

// withGPUs gives the spec the GPU and control nodes nodes and the
// device-cgroup rules that allow them.
func withGPUs(nodes []specs.LinuxDevice) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		ReplaceGPUs(s, nodes)
		return nil
	}
}
