package harness

import (
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
)

// startTaskLogged starts a container's task with its output in logPath.
func (d *Daemon) StartTaskLogged(c client.Container, opts ...client.NewTaskOpts) {
	d.T.Helper()
	_ = os.MkdirAll(filepath.Join(d.Dir, "logs"), 0o755)
	ctx := NamespacedCtx()
	task, err := c.NewTask(ctx, cio.LogFile(d.LogPath(c.ID())), opts...)
	if err != nil {
		d.T.Fatalf("new task %s: %v\n%s", c.ID(), err, LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.T.Fatalf("start %s: %v\n%s", c.ID(), err, LastLines(d.Log(), 30))
	}
}
