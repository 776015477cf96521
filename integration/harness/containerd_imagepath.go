package harness

import (
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
)

// restoreFromPath restores a checkpoint directory into a new container id
// of the test image through client.WithRestoreImagePath and waits for
// its ticks.
func (d *Daemon) RestoreFromPath(dir, id string) {
	d.T.Helper()
	_ = os.MkdirAll(filepath.Join(d.Dir, "logs"), 0o755)
	ctx := NamespacedCtx()
	task, err := d.NewContainer(id).NewTask(ctx, cio.LogFile(d.LogPath(id)), client.WithRestoreImagePath(dir))
	if err != nil {
		d.T.Fatalf("restore %s from %s: %v\n%s", id, dir, err, LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.T.Fatalf("start restored %s: %v\n%s", id, err, LastLines(d.Log(), 30))
	}
	d.WaitTicks(id, 3)
}
