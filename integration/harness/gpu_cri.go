package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criDriverDir is where the container sees the driver's libraries, as
// device plugins mount them (GKE's, for one): a directory of their own,
// first in LD_LIBRARY_PATH.
const criDriverDir = "/usr/local/nvidia/lib64"

// assertGPUContinues checks that the restored workload's counter carried
// on from the checkpoint (its first tick follows the last one printed
// before it, no later than the source pod's last), that it ticks on, and
// that it runs on GPU gpu.
func (p *CRIPod) AssertGPUContinues(t *testing.T, ck CRICheckpoint, last int, gpu string) {
	t.Helper()
	first := FirstTick(p.Output())
	if first <= ck.Before || first > ck.After+1 {
		t.Fatalf("restored pod's first tick %d; want one after %d (the checkpoint), at most %d (did the counter restart?)", first, ck.Before, ck.After+1)
	}
	WaitTicks(t, p.Output, last+2, "the restored pod's ticks")
	if st := p.Status(); st.State != criapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("restored container: %s (%s), want running", st.State, st.Message)
	}
	p.AssertOn(t, gpu)
	t.Logf("restored: first tick %d (checkpoint after tick %d)", first, ck.Before)
}

// gpuConfig is the container of a GPU pod: the CUDA workload, given GPU
// gpu as a device plugin's Allocate gives it, through the container
// config's Devices, Mounts and Envs, and no other GPU.
func (p *CRIPod) GPUConfig(t *testing.T, gpu int) *criapi.ContainerConfig {
	t.Helper()
	cfg := p.AppConfig(GPUImage)
	cfg.Command = []string{"/bin/cudamem", GPUMiB(), "100"}
	cfg.Devices = nil // the host's nodes below, not the fake driver's stand-in
	for _, dev := range GPUDevices {
		if dev == "/dev/nvidia0" {
			dev = fmt.Sprintf("/dev/nvidia%d", gpu)
		}
		cfg.Devices = append(cfg.Devices, &criapi.Device{ContainerPath: dev, HostPath: dev, Permissions: "rwm"})
	}
	libs := NvidiaLibDir(t)
	for _, name := range []string{"libcuda.so.1", "libnvidia-ptxjitcompiler.so.1"} {
		cfg.Mounts = append(cfg.Mounts, &criapi.Mount{ContainerPath: filepath.Join(criDriverDir, name),
			HostPath: filepath.Join(libs, name), Readonly: true})
	}
	// The rootfs's /usr/lib still serves the workload's own libraries.
	cfg.Envs = []*criapi.KeyValue{{Key: "LD_LIBRARY_PATH", Value: criDriverDir + ":/usr/lib"}}
	return cfg
}

// output is the workload's output: the container's CRI log without each
// line's prefix (time, stream, tag), so that tick lines start the lines
// as tickRe expects.
func (p *CRIPod) Output() string {
	var b strings.Builder
	for _, line := range strings.Split(ReadFile(p.LogPath()), "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			b.WriteString(f[3] + "\n")
		}
	}
	return b.String()
}

// assertOn checks that the container's process holds memory on GPU uuid
// alone. nvidia-smi names processes by their pid on the host.
func (p *CRIPod) AssertOn(t *testing.T, uuid string) {
	t.Helper()
	pid := p.hostPid(t)
	if on := GpusOf(t, pid); len(on) != 1 || on[0] != uuid {
		t.Fatalf("pod %s: its workload (pid %d) runs on %v, want %s", p.Name, pid, on, uuid)
	}
}

// hostPid is the pid on the host of the container's process, from its
// task in CRI's containerd namespace.
func (p *CRIPod) hostPid(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), CRINamespace), CRICall)
	defer cancel()
	c, err := p.N.Client.LoadContainer(ctx, p.Container)
	if err != nil {
		t.Fatalf("load container %s: %v", p.Container, err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		t.Fatalf("task of %s: %v", p.Container, err)
	}
	return int(task.Pid())
}
