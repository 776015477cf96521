package ctrd

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Inventory reads the host's GPUs (cuda.Driver.Inventory); Restore calls
// it only when --gpus names a GPU by index or UUID.
type Inventory func(context.Context) (cuda.Inventory, error)

// ResolveGPUs turns the items of --gpus into the device nodes the restored
// container gets. An item is a GPU index as nvidia-smi prints it, a GPU
// UUID (or a unique prefix of one), or the path of a GPU's device node (as
// a device plugin hands it out). The node's device numbers are the host's;
// its path in the container is /dev/<name>, so that the shim, which knows
// a GPU by its node's name, restores the workload onto that GPU.
func ResolveGPUs(ctx context.Context, items []string, inv Inventory) ([]specs.LinuxDevice, error) {
	var host *cuda.Inventory
	var nodes []specs.LinuxDevice
	seen := map[string]bool{}
	for _, item := range items {
		path := item
		if !filepath.IsAbs(item) {
			if host == nil {
				if inv == nil {
					return nil, report.WithRemedy(fmt.Errorf("--gpus %s: no GPU inventory to find it in: %w", item, ErrNoGPU), "give its device node's path (/dev/nvidiaN)")
				}
				got, err := inv(ctx)
				if err != nil {
					return nil, report.WithRemedy(fmt.Errorf("--gpus %s: read the host's GPUs: %w", item, err), "give device node paths (/dev/nvidia1), or make NVML available (CRYO_LIBNVML)")
				}
				host = &got
			}
			g, err := pickGPU(item, host.GPUs)
			if err != nil {
				return nil, err
			}
			path = "/dev/nvidia" + strconv.Itoa(g.Minor)
		}
		n, err := hostNode(path)
		if err != nil {
			return nil, fmt.Errorf("--gpus %s: %w", item, err)
		}
		if !seen[n.Path] { // "1,GPU-…" may name one GPU twice
			seen[n.Path] = true
			nodes = append(nodes, n)
		}
	}
	return nodes, nil
}

func nodePaths(nodes []specs.LinuxDevice) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = fmt.Sprintf("%s (%d:%d)", n.Path, n.Major, n.Minor)
	}
	return out
}

// pickGPU finds the GPU that an index or a UUID (prefix) names.
func pickGPU(item string, gpus []cuda.GPU) (cuda.GPU, error) {
	var found []cuda.GPU
	for _, g := range gpus {
		if strconv.Itoa(g.Index) == item || (strings.HasPrefix(item, "GPU-") && strings.HasPrefix(g.UUID, item)) {
			found = append(found, g)
		}
	}
	switch {
	case len(found) != 1:
		return cuda.GPU{}, report.WithRemedy(fmt.Errorf("--gpus %s: this host has no GPU %s (it has %s): %w", item, item, listGPUs(gpus), ErrNoGPU), "give an index or a UUID that `nvidia-smi -L` lists")
	case found[0].Minor < 0:
		return cuda.GPU{}, report.WithRemedy(fmt.Errorf("--gpus %s: NVML does not tell the device node of GPU %d: %w", item, found[0].Index, ErrNoGPU), "give its node's path (/dev/nvidiaN)")
	}
	return found[0], nil
}

func listGPUs(gpus []cuda.GPU) string {
	if len(gpus) == 0 {
		return "none"
	}
	parts := make([]string, len(gpus))
	for i, g := range gpus {
		parts[i] = fmt.Sprintf("%d: %s %s", g.Index, g.Name, g.UUID)
	}
	return strings.Join(parts, "; ")
}

// hostNode reads a GPU's device node on the host.
func hostNode(path string) (specs.LinuxDevice, error) {
	name := filepath.Base(path)
	if _, ok := cuda.NodeMinor("/dev/" + name); !ok {
		return specs.LinuxDevice{}, report.WithRemedy(fmt.Errorf("%s is not a GPU's device node (nvidiaN): %w", path, ErrNoGPU), "give a GPU index, a UUID or a /dev/nvidiaN path")
	}
	n, err := charDevice(path)
	if errors.Is(err, errNotCharDevice) {
		return n, report.WithRemedy(fmt.Errorf("%s is not a character device: %w", path, ErrNoGPU), "give a GPU's device node")
	}
	if err != nil {
		return n, report.WithRemedy(fmt.Errorf("device node %s: %w: %w", path, err, ErrNoGPU), "load the NVIDIA driver and create its nodes (nvidia-modprobe, or nvidia-smi once)")
	}
	n.Path = "/dev/" + name
	return n, nil
}

// ReplaceGPUs gives spec the GPU device nodes nodes in place of its own,
// and device-cgroup rules that allow them in place of the rules for NVIDIA
// GPU nodes (195:N, N < 254). nvidiactl, nvidia-uvm and every other device
// stay: a GPU container needs them whichever GPU it gets. This is what a
// device plugin does when it gives a restored pod other GPUs; the shim then
// finds the new GPUs in the spec and remaps CUDA onto them.
func ReplaceGPUs(spec *specs.Spec, nodes []specs.LinuxDevice) {
	if spec.Linux == nil {
		spec.Linux = &specs.Linux{}
	}
	var devs []specs.LinuxDevice
	for _, d := range spec.Linux.Devices {
		if _, gpu := cuda.NodeMinor(d.Path); !gpu {
			devs = append(devs, d)
		}
	}
	spec.Linux.Devices = append(devs, nodes...)
	if spec.Linux.Resources == nil {
		spec.Linux.Resources = &specs.LinuxResources{}
	}
	var rules []specs.LinuxDeviceCgroup
	for _, r := range spec.Linux.Resources.Devices {
		if !isGPURule(r) {
			rules = append(rules, r)
		}
	}
	for _, n := range nodes {
		major, minor := n.Major, n.Minor
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "rwm"})
	}
	spec.Linux.Resources.Devices = rules
}

// isGPURule: an allow rule for one NVIDIA GPU node.
func isGPURule(r specs.LinuxDeviceCgroup) bool {
	return r.Allow && r.Major != nil && r.Minor != nil && cuda.IsGPUDevice(*r.Major, *r.Minor)
}
