package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// GiveStandIns makes spec s name the GPUs gpus (by index, /dev/nvidia<i>)
// and no other, as a device plugin or CDI does: stand-in nodes and a
// device-cgroup rule that allows them. No gpus: no GPU node at all.
func GiveStandIns(s *specs.Spec, gpus ...int) {
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	var devs []specs.LinuxDevice
	for _, d := range s.Linux.Devices {
		if !strings.HasPrefix(d.Path, "/dev/nvidia") {
			devs = append(devs, d)
		}
	}
	mode, zero := os.FileMode(0o666), uint32(0)
	for _, g := range gpus {
		devs = append(devs, specs.LinuxDevice{Path: fmt.Sprintf("/dev/nvidia%d", g), Type: "c", Major: 1, Minor: 3, FileMode: &mode, UID: &zero, GID: &zero})
	}
	s.Linux.Devices = devs
	if len(gpus) == 0 {
		return
	}
	if s.Linux.Resources == nil {
		s.Linux.Resources = &specs.LinuxResources{}
	}
	major, minor := int64(1), int64(3)
	s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "rwm"})
}

// WithStandIns is GiveStandIns for a spec that containerd's client builds.
func WithStandIns(gpus ...int) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		GiveStandIns(s, gpus...)
		return nil
	}
}

// criStandIn is GPU 0's stand-in as a device plugin's Allocate hands a
// node to the kubelet: containerd's CRI reads the host path's device
// numbers (the null device) and puts the node at the container path.
func criStandIn() *criapi.Device {
	return &criapi.Device{ContainerPath: "/dev/nvidia0", HostPath: "/dev/null", Permissions: "rwm"}
}

// PodmanStandIn gives a Podman container GPU 0's stand-in node.
var PodmanStandIn = []string{"--device", "/dev/null:/dev/nvidia0"}

// StandInNode makes GPU gpu's stand-in as a node on the host, for the
// restores whose GPUs are given by the path of a host node (`cryo image
// restore --gpus`): a null device named nvidia<gpu> in a directory of the
// test's, never under /dev.
func StandInNode(t testing.TB, gpu int) string {
	t.Helper()
	node := filepath.Join(t.TempDir(), fmt.Sprintf("nvidia%d", gpu))
	if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	return node
}
