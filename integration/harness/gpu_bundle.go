package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// The four things a container needs to see the GPU: the device nodes, a
// device-cgroup rule for them, the driver's user-space libraries in the
// rootfs, and LD_LIBRARY_PATH pointing at them.

// GPUDevices are the device nodes a CUDA process opens.
var GPUDevices = []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// NvidiaLibDir is where the host's libcuda.so.1 lives.
func NvidiaLibDir(t *testing.T) string {
	if d := os.Getenv("CRYO_NVIDIA_LIBS"); d != "" {
		return d
	}
	for _, d := range []string{"/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"} {
		if _, err := os.Stat(filepath.Join(d, "libcuda.so.1")); err == nil {
			return d
		}
	}
	t.Fatal("libcuda.so.1 not found: set CRYO_NVIDIA_LIBS to the driver's library directory")
	return ""
}

// BaseSpec is a container spec without devices, in the host's network.
func BaseSpec(args ...string) *specs.Spec {
	return &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: "rootfs"},
		Hostname: "cryo-gpu",
		Process: &specs.Process{
			Args:    args,
			Env:     []string{"PATH=/bin", "LD_LIBRARY_PATH=/usr/lib"},
			Cwd:     "/",
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}},
			Resources:  &specs.LinuxResources{},
		},
	}
}

// WriteSpec writes s as the bundle's config.json.
func WriteSpec(t *testing.T, bundle string, s *specs.Spec) {
	t.Helper()
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}
