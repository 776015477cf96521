package harness

import (
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
)

const GPUImage = "localhost/cryo/cudamem:test"

// newGPUContainer creates a container of the CUDA image on the cryo runtime
// with the GPU device nodes and the host's network.
func (d *Daemon) NewGPUContainer(t *testing.T, id string) client.Container {
	return d.NewGPUContainerNet(t, id, true)
}

func (d *Daemon) StartGPUTask(t *testing.T, c client.Container) {
	t.Helper()
	ctx := NamespacedCtx()
	task, err := c.NewTask(ctx, cio.LogFile(d.LogPath(c.ID())))
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

// FirstTick is the first tick number of a workload's output.
func FirstTick(out string) int {
	m := tickRe.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n := 0
	for _, c := range m[1] {
		n = n*10 + int(c-'0')
	}
	return n
}
