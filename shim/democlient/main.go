// Command democlient restores a `ctr task checkpoint` image as a new
// container: ctr itself can only restore `ctr container checkpoint` images.
// The new container copies the original's image, runtime and spec (so GPU
// devices and mounts come along) on a fresh snapshot. contrib/demo.sh
// builds and runs it. With -gpu-device, the new container gets that GPU
// instead of the original's (as a device plugin would give a restored pod
// another GPU), and cryo restores the workload onto it.
//
//	democlient -address SOCK -namespace NS -from ID -checkpoint REF -id NEW -log FILE [-gpu-device /dev/nvidia1]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

type args struct {
	address, namespace, from, checkpoint, id, log, gpu string
}

func main() {
	var a args
	flag.StringVar(&a.address, "address", "/run/containerd/containerd.sock", "containerd socket")
	flag.StringVar(&a.namespace, "namespace", "default", "containerd namespace")
	flag.StringVar(&a.from, "from", "", "the checkpointed container")
	flag.StringVar(&a.checkpoint, "checkpoint", "", "image name printed by `ctr task checkpoint`")
	flag.StringVar(&a.id, "id", "", "id of the new container")
	flag.StringVar(&a.log, "log", "", "file for the new container's output")
	flag.StringVar(&a.gpu, "gpu-device", "", "give the new container this GPU device node instead of the original's")
	flag.Parse()
	if a.from == "" || a.checkpoint == "" || a.id == "" || a.log == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := restore(a); err != nil {
		fmt.Fprintf(os.Stderr, "democlient: %v\n", err)
		os.Exit(1)
	}
}

func restore(a args) error {
	c, err := client.New(a.address)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), a.namespace)
	ckpt, err := c.GetImage(ctx, a.checkpoint)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", a.checkpoint, err)
	}
	ctr, err := clone(ctx, c, a.from, a.id, a.gpu)
	if err != nil {
		return err
	}
	task, err := ctr.NewTask(ctx, cio.LogFile(a.log), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		return fmt.Errorf("restore %s from %s: %w", a.id, a.checkpoint, err)
	}
	return task.Start(ctx)
}

// clone creates container id with the image, runtime and spec of from, on
// a new snapshot of the image, in its own cgroup.
func clone(ctx context.Context, c *client.Client, from, id, gpu string) (client.Container, error) {
	orig, err := c.LoadContainer(ctx, from)
	if err != nil {
		return nil, err
	}
	info, err := orig.Info(ctx)
	if err != nil {
		return nil, err
	}
	spec, err := orig.Spec(ctx)
	if err != nil {
		return nil, err
	}
	img, err := orig.Image(ctx)
	if err != nil {
		return nil, err
	}
	if spec.Linux != nil {
		// Only the last element names the container ("/ns/id" or
		// "slice:prefix:id"); the namespace may contain the id as a word.
		if p := spec.Linux.CgroupsPath; strings.HasSuffix(p, from) {
			spec.Linux.CgroupsPath = strings.TrimSuffix(p, from) + id
		}
	}
	if gpu != "" {
		if err := giveGPU(spec, gpu); err != nil {
			return nil, err
		}
	}
	var ropts any
	if info.Runtime.Options != nil {
		ropts = info.Runtime.Options
	}
	return c.NewContainer(ctx, id,
		client.WithImage(img), client.WithNewSnapshot(id+"-snapshot", img),
		client.WithRuntime(info.Runtime.Name, ropts), client.WithSpec(spec))
}

// gpuNode matches a GPU's device node (not nvidiactl or nvidia-uvm).
var gpuNode = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// giveGPU replaces the spec's GPU device nodes, and their device-cgroup
// rules, with the host device at path.
func giveGPU(spec *oci.Spec, path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("GPU device %s: %w", path, err)
	}
	major, minor := int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	var devs []specs.LinuxDevice
	for _, d := range spec.Linux.Devices {
		if !gpuNode.MatchString(d.Path) {
			devs = append(devs, d)
		}
	}
	var rules []specs.LinuxDeviceCgroup
	for _, r := range spec.Linux.Resources.Devices {
		if r.Major == nil || *r.Major != 195 || r.Minor == nil || *r.Minor >= 254 {
			rules = append(rules, r)
		}
	}
	mode, zero := os.FileMode(0o666), uint32(0)
	spec.Linux.Devices = append(devs, specs.LinuxDevice{Path: path, Type: "c", Major: major, Minor: minor, FileMode: &mode, UID: &zero, GID: &zero})
	spec.Linux.Resources.Devices = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: &minor, Access: "rwm"})
	return nil
}
