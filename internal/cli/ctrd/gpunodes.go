package ctrd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// controlNodes are the NVIDIA nodes that every GPU container needs besides
// its GPUs' own: CUDA opens them again when the shim resumes it.
var controlNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// gpuNodes are the device nodes the restored container gets: those of
// --gpus, else this host's nodes of the names it ran with, and then the
// control nodes this host has. Each is read from this host's /dev (see
// hostNode), never copied from the checkpoint's spec, whose device
// numbers an image's builder chose. No GPU nodes, no nodes at all: the
// container then sees the GPUs as it did at checkpoint, through its
// image's environment (NVIDIA_VISIBLE_DEVICES), or all of them.
func (r *ctrdRestore) gpuNodes(ctx context.Context, c carried) ([]specs.LinuxDevice, error) {
	var nodes []specs.LinuxDevice
	var err error
	if len(r.o.GPUs) > 0 {
		nodes, err = ResolveGPUs(ctx, r.o.GPUs, r.o.Inventory)
	} else {
		nodes, err = recordedGPUs(c.gpuNames)
	}
	if err != nil || len(nodes) == 0 {
		return nil, err
	}
	r.logf("container %s gets the GPU nodes %s", r.o.Name, strings.Join(nodePaths(nodes), ", "))
	for _, p := range controlNodes {
		if n, err := charDevice(p); err == nil {
			nodes = append(nodes, n)
		}
	}
	return nodes, nil
}

// recordedGPUs are this host's nodes of the names the checkpointed
// container's GPU nodes had (/dev/nvidia1 there: /dev/nvidia1 here).
func recordedGPUs(names []string) ([]specs.LinuxDevice, error) {
	var nodes []specs.LinuxDevice
	for _, name := range names {
		n, err := hostNode("/dev/" + name)
		if err != nil {
			return nil, report.WithRemedy(fmt.Errorf("the checkpoint ran with GPU node /dev/%s: %w", name, err), "pass --gpus with GPUs of this host (nvidia-smi -L)")
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// errNotCharDevice: a node path that is something else.
var errNotCharDevice = errors.New("not a character device")

// charDevice reads the character device at path on this host into a
// spec device of the same path, read-write for all as containerd's
// WithLinuxDevice makes one.
func charDevice(path string) (specs.LinuxDevice, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return specs.LinuxDevice{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return specs.LinuxDevice{}, fmt.Errorf("%s: %w", path, errNotCharDevice)
	}
	mode, zero := os.FileMode(0o666), uint32(0)
	return specs.LinuxDevice{Path: path, Type: "c", Major: int64(unix.Major(st.Rdev)), Minor: int64(unix.Minor(st.Rdev)),
		FileMode: &mode, UID: &zero, GID: &zero}, nil
}
