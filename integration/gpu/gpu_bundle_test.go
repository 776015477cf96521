package gpu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

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
	harness.CopyFile(t, filepath.Join(harness.BinDir(), "busybox"), filepath.Join(root, "bin/busybox"), 0o755)
	for _, a := range []string{"sh", "sleep", "cat", "ls"} {
		_ = os.Symlink("busybox", filepath.Join(root, "bin", a))
	}
	app := cudamemBin(t)
	harness.CopyFile(t, app, filepath.Join(root, "bin/cudamem"), 0o755)
	for _, lib := range harness.SharedLibs(t, app) {
		harness.CopyFile(t, lib, filepath.Join(root, lib), 0o755)
	}
	libs := harness.NvidiaLibDir(t)
	for _, name := range []string{"libcuda.so.1", "libnvidia-ptxjitcompiler.so.1"} {
		lib := filepath.Join(libs, name)
		harness.CopyFile(t, lib, filepath.Join(root, "usr/lib", name), 0o755)
		// libcuda needs libm, librt, … which the workload itself may not.
		for _, dep := range harness.SharedLibs(t, lib) {
			if _, err := os.Stat(filepath.Join(root, dep)); err != nil {
				harness.CopyFile(t, dep, filepath.Join(root, dep), 0o755)
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
	harness.WriteSpec(t, bundle, newGPUSpec(t, args...))
}

// newGPUSpec is gpuSpec's spec, for callers that add mounts or environment.
func newGPUSpec(t *testing.T, args ...string) *specs.Spec {
	t.Helper()
	s := harness.BaseSpec(args...)
	for _, dev := range harness.GPUDevices {
		d, rule := deviceOf(t, dev)
		s.Linux.Devices = append(s.Linux.Devices, d)
		s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, rule)
	}
	return s
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
