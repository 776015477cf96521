package orchestrate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/bundle"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// GPUScope is which of the host's GPUs a restored container may use: the
// GPU device nodes its (new) spec names, as a device plugin or CDI put them
// there, else, where the spec runs the NVIDIA container toolkit's hook,
// its NVIDIA_VISIBLE_DEVICES (the toolkit's legacy mode), else none. The
// zero value is all of the host's GPUs, as for a bare process.
type GPUScope struct {
	// Nodes are the spec's GPU device nodes (/dev/nvidiaN).
	Nodes []specs.LinuxDevice
	// Visible is NVIDIA_VISIBLE_DEVICES from the spec's environment.
	Visible *string
	// Deferred: the spec is not known before the restore (CRIU's action
	// script); the GPUs are those whose nodes the restored container has.
	Deferred bool
	// Cgroup is the spec's cgroupsPath: the restored processes belong
	// there, under the new spec's device rules (see fixup.JoinSpecCgroup).
	Cgroup string
	// HostNetwork: the spec gives the container no network namespace of its
	// own, so its sockets are restored in the host's (see waitTimeWait).
	HostNetwork bool
	// Container: the restore is into a container (ScopeFromSpec; a
	// Deferred scope is a container's too), which only a checkpoint with
	// cryo's manifest may enter (see noManifest). False for a bare tree.
	Container bool
	// Spec is the container's new spec, when the scope was read from one:
	// the restore is confined to it (see confineToSpec), and a container
	// whose spec names no GPU node gets no GPU.
	Spec *specs.Spec
}

// ScopeFromRoot is the scope of the GPU nodes under /proc/<pid>/root/dev.
func ScopeFromRoot(pid int) GPUScope {
	var sc GPUScope
	dev := fmt.Sprintf("/proc/%d/root/dev", pid)
	entries, _ := os.ReadDir(dev)
	for _, e := range entries {
		var st unix.Stat_t
		if _, ok := cuda.NodeMinor("/dev/" + e.Name()); !ok || unix.Stat(filepath.Join(dev, e.Name()), &st) != nil {
			continue
		}
		sc.Nodes = append(sc.Nodes, specs.LinuxDevice{Path: "/dev/" + e.Name(), Type: "c",
			Major: int64(unix.Major(st.Rdev)), Minor: int64(unix.Minor(st.Rdev))})
	}
	return sc
}

// ScopeFromSpec reads the GPU scope of a container from its spec.
func ScopeFromSpec(s *specs.Spec) GPUScope {
	sc := GPUScope{Container: true}
	if s == nil {
		return sc
	}
	sc.Spec = s
	if s.Linux != nil {
		for _, d := range s.Linux.Devices {
			if _, ok := nodeMinor(d); ok {
				sc.Nodes = append(sc.Nodes, d)
			}
		}
	}
	if s.Linux != nil {
		sc.Cgroup = s.Linux.CgroupsPath
		sc.HostNetwork = true
		for _, ns := range s.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace {
				sc.HostNetwork = false
			}
		}
	}
	if s.Process != nil {
		for _, kv := range s.Process.Env {
			if v, ok := strings.CutPrefix(kv, "NVIDIA_VISIBLE_DEVICES="); ok {
				sc.Visible = &v
			}
		}
	}
	return sc
}

// ScopeFromBundle reads the GPU scope of the container whose bundle is dir.
func ScopeFromBundle(dir string) (GPUScope, error) {
	s, err := bundle.Read(dir)
	switch {
	case bundle.IsParse(err):
		return GPUScope{}, fmt.Errorf("parse %s/config.json: %w", dir, err)
	case err != nil:
		return GPUScope{}, fmt.Errorf("read the container's spec: %w", err)
	}
	return ScopeFromSpec(s), nil
}

// toolkitHook: the spec runs the NVIDIA container toolkit's hook, which
// gives the container the GPUs its NVIDIA_VISIBLE_DEVICES names (the
// toolkit's legacy mode: the nodes are not in the spec).
func toolkitHook(s *specs.Spec) bool {
	if s.Hooks == nil {
		return false
	}
	//lint:ignore SA1019 the toolkit's legacy mode installs its hook as a Prestart hook, deprecated or not
	for _, hooks := range [][]specs.Hook{s.Hooks.Prestart, s.Hooks.CreateRuntime} {
		for _, h := range hooks {
			if strings.Contains(filepath.Base(h.Path), "nvidia-container") {
				return true
			}
		}
	}
	return false
}

// nodeMinor is the GPU minor of a spec device: by its NVIDIA major and
// minor, or by its path when it is not an NVIDIA device (a test's stand-in).
func nodeMinor(d specs.LinuxDevice) (int, bool) {
	if d.Type == "c" && cuda.IsGPUDevice(d.Major, d.Minor) {
		return int(d.Minor), true
	}
	return cuda.NodeMinor(d.Path)
}

// Targets returns the GPUs of inv in the scope, in CUDA's order.
func (sc GPUScope) Targets(inv cuda.Inventory) ([]cuda.GPU, error) {
	if len(sc.Nodes) > 0 {
		var minors []int
		for _, d := range sc.Nodes {
			n, _ := nodeMinor(d)
			minors = append(minors, n)
		}
		gpus, unknown := inv.ByMinors(minors)
		if len(unknown) > 0 {
			return nil, fmt.Errorf("the container's spec gives it /dev/nvidia%d, which is no GPU of this host (%s): %w", unknown[0], cuda.DescribeGPUs(inv.GPUs), manifest.ErrIncompatibleHost)
		}
		return gpus, nil
	}
	if sc.Spec != nil && !toolkitHook(sc.Spec) {
		// A container's GPUs are the device nodes its spec names. Its
		// NVIDIA_VISIBLE_DEVICES is the pod author's to set, and grants
		// a GPU only where the NVIDIA toolkit's hook acts on it.
		return nil, nil
	}
	if sc.Visible == nil {
		return inv.GPUs, nil
	}
	switch v := strings.TrimSpace(*sc.Visible); v {
	case "all":
		return inv.GPUs, nil
	case "", "none", "void":
		return nil, nil
	default:
		return cuda.VisibleDevices{Set: true, Value: v}.Select(inv.GPUs)
	}
}
