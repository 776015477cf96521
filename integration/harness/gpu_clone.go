package harness

import (
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// newGPUContainerNet is newGPUContainer with the host's network (hostNet)
// or a network namespace of its own.
func (d *Daemon) NewGPUContainerNet(t *testing.T, id string, hostNet bool) client.Container {
	t.Helper()
	return d.NewCryoContainer(t, id, GPUImage, []string{"/bin/cudamem", GPUMiB(), "100"}, hostNet, true)
}

// newCryoContainer creates a container of image running args on the cryo
// runtime, with the host's network (hostNet) and the GPU devices (gpu), or
// else the fake driver's GPU 0 (a stand-in node).
func (d *Daemon) NewCryoContainer(t testing.TB, id, image string, args []string, hostNet, gpu bool) client.Container {
	t.Helper()
	ctx := NamespacedCtx()
	img, err := d.Client.GetImage(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	opts := []oci.SpecOpts{oci.WithImageConfig(img), oci.WithProcessArgs(args...), oci.WithEnv([]string{"LD_LIBRARY_PATH=/usr/lib"})}
	if hostNet {
		opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace))
	}
	if gpu {
		for _, dev := range GPUDevices {
			opts = append(opts, oci.WithLinuxDevice(dev, "rwm"))
		}
	} else {
		opts = append(opts, WithStandIns(0)) // the fake driver's GPU 0
	}
	c, err := d.Client.NewContainer(ctx, id, client.WithImage(img), client.WithNewSnapshot(id+"-snap", img),
		client.WithRuntime(CryoRuntime, nil), client.WithNewSpec(opts...))
	if err != nil {
		t.Fatalf("new container %s: %v", id, err)
	}
	return c
}
