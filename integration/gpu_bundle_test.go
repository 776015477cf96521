package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The four things a container needs to see the GPU: the device nodes, a
// device-cgroup rule for them, the driver's user-space libraries in the
// rootfs, and LD_LIBRARY_PATH pointing at them.

// gpuDevices are the device nodes a CUDA process opens.
var gpuDevices = []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// nvidiaLibDir is where the host's libcuda.so.1 lives.
func nvidiaLibDir(t *testing.T) string {
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

// gpuRootfs builds a rootfs with busybox, the CUDA workload at /bin/cudamem,
// its libraries, and the driver's libcuda and PTX JIT in /usr/lib.
func gpuRootfs(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "usr/lib", "tmp", "proc", "sys", "dev", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, filepath.Join(binDir(), "busybox"), filepath.Join(root, "bin/busybox"), 0o755)
	for _, a := range []string{"sh", "sleep", "cat", "ls"} {
		_ = os.Symlink("busybox", filepath.Join(root, "bin", a))
	}
	app := cudamemBin(t)
	copyFile(t, app, filepath.Join(root, "bin/cudamem"), 0o755)
	for _, lib := range sharedLibs(t, app) {
		copyFile(t, lib, filepath.Join(root, lib), 0o755)
	}
	libs := nvidiaLibDir(t)
	for _, name := range []string{"libcuda.so.1", "libnvidia-ptxjitcompiler.so.1"} {
		lib := filepath.Join(libs, name)
		copyFile(t, lib, filepath.Join(root, "usr/lib", name), 0o755)
		// libcuda needs libm, librt, … which the workload itself may not.
		for _, dep := range sharedLibs(t, lib) {
			if _, err := os.Stat(filepath.Join(root, dep)); err != nil {
				copyFile(t, dep, filepath.Join(root, dep), 0o755)
			}
		}
	}
	return root
}

// gpuSpec writes a runc bundle's config.json that runs args with the GPU.
// It shares the host's network namespace: the GPU host has no iptables, which
// CRIU needs to dump a private network namespace.
func gpuSpec(t *testing.T, bundle string, args ...string) {
	t.Helper()
	writeSpec(t, bundle, newGPUSpec(t, args...))
}

// newGPUSpec is gpuSpec's spec, for callers that add mounts or environment.
func newGPUSpec(t *testing.T, args ...string) *specs.Spec {
	t.Helper()
	s := baseSpec(args...)
	for _, dev := range gpuDevices {
		d, rule := deviceOf(t, dev)
		s.Linux.Devices = append(s.Linux.Devices, d)
		s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, rule)
	}
	return s
}

// baseSpec is a container spec without devices, in the host's network.
func baseSpec(args ...string) *specs.Spec {
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

// readSpec reads the bundle's config.json.
func readSpec(t *testing.T, bundle string) *specs.Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// writeSpec writes s as the bundle's config.json.
func writeSpec(t *testing.T, bundle string, s *specs.Spec) {
	t.Helper()
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// deviceOf describes a host character device for the spec and its cgroup rule.
func deviceOf(t *testing.T, path string) (specs.LinuxDevice, specs.LinuxDeviceCgroup) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("GPU device %s: %v", path, err)
	}
	major, minor := int64(unix.Major(uint64(st.Rdev))), int64(unix.Minor(uint64(st.Rdev)))
	mode := os.FileMode(0o666)
	zero := uint32(0)
	return specs.LinuxDevice{Path: path, Type: "c", Major: major, Minor: minor, FileMode: &mode, UID: &zero, GID: &zero},
		specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "rwm"}
}
