package integration

// A container's GPUs are the GPU device nodes its spec names, as on a real
// host, where a process can open only the nodes its container has. The
// fake driver's GPUs have no nodes of their own, so every container that
// runs the fake app is given stand-ins: /dev/nvidiaN nodes whose device is
// the null device (1:3), which the app opens as it would a GPU's node, and
// a device-cgroup rule for them. Each way of making a container has its
// helper here; they never create anything under the host's /dev.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// giveStandIns makes spec s name the GPUs gpus (by index, /dev/nvidia<i>)
// and no other, as a device plugin or CDI does: stand-in nodes and a
// device-cgroup rule that allows them. No gpus: no GPU node at all.
func giveStandIns(s *specs.Spec, gpus ...int) {
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

// withStandIns is giveStandIns for a spec that containerd's client builds.
func withStandIns(gpus ...int) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		giveStandIns(s, gpus...)
		return nil
	}
}

// criStandIn is GPU 0's stand-in as a device plugin's Allocate hands a
// node to the kubelet: containerd's CRI reads the host path's device
// numbers (the null device) and puts the node at the container path.
func criStandIn() *criapi.Device {
	return &criapi.Device{ContainerPath: "/dev/nvidia0", HostPath: "/dev/null", Permissions: "rwm"}
}

// podmanStandIn gives a Podman container GPU 0's stand-in node.
var podmanStandIn = []string{"--device", "/dev/null:/dev/nvidia0"}

// standInNode makes GPU gpu's stand-in as a node on the host, for the
// restores whose GPUs are given by the path of a host node (`cryo image
// restore --gpus`): a null device named nvidia<gpu> in a directory of the
// test's, never under /dev.
func standInNode(t testing.TB, gpu int) string {
	t.Helper()
	node := filepath.Join(t.TempDir(), fmt.Sprintf("nvidia%d", gpu))
	if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	return node
}

// TestScopeEnvGrantsNoGPU (F9): a pod author sets NVIDIA_VISIBLE_DEVICES
// in a container's environment; without a GPU node in its spec, and
// without the NVIDIA toolkit's hook that would act on the variable, the
// container has no GPU, so the restore of a GPU checkpoint into it is
// refused at the shim's check, naming the GPU, before CRIU runs and with no
// task left. The same checkpoint restores into a container whose spec
// names a GPU node (a stand-in), and the app goes on on that GPU.
func TestScopeEnvGrantsNoGPU(t *testing.T) {
	requireRoot(t)
	for _, v := range ctrdVersions {
		t.Run(v.name, func(t *testing.T) {
			d := newDaemon(t, v, false)
			criu := newLoggingCRIU(t)
			d.criu = &criu
			d.start()
			d.importTestImage()
			testEnvGrantsNoGPU(d, criu)
		})
	}
}

func testEnvGrantsNoGPU(d *daemon, criu loggingCRIU) {
	h := newFakeHost(1, "f9f9f9f9")
	d.fakeGPUs(h)
	d.startApp(d.newContainerWith("f9-src", nil, withGPUs(h, 0)))
	ref, before := d.taskCheckpoint("f9-src", "--exit")
	d.waitStopped("f9-src")
	if m := d.checkpointManifest(ref); len(m.Needs) != 1 || m.Needs[0].UUID != h.UUIDs[0] {
		d.t.Fatalf("the checkpoint needs %+v, want GPU %s", m.Needs, h.UUIDs[0])
	}
	ctx := namespacedCtx()
	ckpt, err := d.client.GetImage(ctx, ref)
	if err != nil {
		d.t.Fatal(err)
	}
	envAll := oci.WithEnv([]string{"NVIDIA_VISIBLE_DEVICES=all"})

	// The attacker's container: the variable, no GPU node.
	dumps := criu.runcSwrks()
	bare := d.newContainerWith("f9-env", nil, withGPUs(h), envAll)
	assertNoGPUNode(d.t, ctx, bare)
	_, err = bare.NewTask(ctx, cio.LogFile(d.logPath("f9-env")), client.WithTaskCheckpoint(ckpt))
	if err == nil {
		d.t.Fatalf("a GPU checkpoint was restored into a container without a GPU node\n%s", lastLines(d.log(), 30))
	}
	wantIn(d.t, err.Error(), "no matching GPU", "1× NVIDIA H100 80GB HBM3", "would see no GPU", "nothing was restored")
	if !errdefs.IsFailedPrecondition(err) {
		d.t.Errorf("error class %v, want failed precondition", err)
	}
	d.assertNoTask("f9-env")
	d.assertNoRestore("f9-env")
	if criu.runcSwrks() != dumps {
		d.t.Fatalf("CRIU ran for the refused restore:\n%s", readFile(criu.calls))
	}

	// The same restore into a container given the GPU's node.
	given := d.newContainerWith("f9-node", nil, withGPUs(h, 0), envAll)
	task, err := given.NewTask(ctx, cio.LogFile(d.logPath("f9-node")), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		d.t.Fatalf("restore with the GPU's node: %v\n%s", err, lastLines(d.log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.t.Fatal(err)
	}
	d.waitTicks("f9-node", 3)
	assertContinues(d.t, d.logPath("f9-node"), before)
	d.assertGPUs("f9-node", h, 0)
	if criu.runcSwrks() == dumps {
		d.t.Fatalf("runc restored without CRYO_CRIU=%s", criu.path)
	}
}

// assertNoGPUNode checks that container c's spec names no GPU node and
// sets NVIDIA_VISIBLE_DEVICES: the attack's premise.
func assertNoGPUNode(t testing.TB, ctx context.Context, c client.Container) {
	t.Helper()
	s, err := c.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range s.Linux.Devices {
		if strings.HasPrefix(dev.Path, "/dev/nvidia") {
			t.Fatalf("the spec names %s", dev.Path)
		}
	}
	if !slices.Contains(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=all") {
		t.Fatalf("the spec's environment lacks NVIDIA_VISIBLE_DEVICES=all: %v", s.Process.Env)
	}
}
