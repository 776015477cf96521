package gpu

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/cryo-gpu/cryo/integration/harness"
)

// gpuTask is a workload container driven through one of cryo's front ends,
// so that one test body covers both: cryo-runc (runcTask) and containerd
// with the cryo shim (shimTask). Checkpoints stop the container (--exit);
// a restore brings it back under the same name, its output appended.
type gpuTask interface {
	Output() string
	Checkpoint() time.Duration
	Restore() time.Duration
	signal(sig string)
	PID() int
}

// gpuFlavor starts a runc bundle (config.json and rootfs, as built by
// pyContainer or gpuRootfs and gpuSpec) through one front end.
type gpuFlavor struct {
	name  string
	start func(t *testing.T, c *harness.RuncContainer) gpuTask
}

// gpuFlavors are cryo-runc and the containerd shim; each test that takes
// them runs once per flavor, as a subtest named after it.
func gpuFlavors() []gpuFlavor {
	return []gpuFlavor{
		runcFlavor("cryo-runc"),
		{"shim", func(t *testing.T, c *harness.RuncContainer) gpuTask {
			d := harness.StartDaemonWith(t, harness.CtrdVersions[1], true)
			return startShimTask(t, d, c.ID, c.Bundle)
		}},
	}
}

// runcFlavor runs the bundle with the RuncContainer's own runc (cryo-runc,
// or plain runc for a baseline).
func runcFlavor(name string) gpuFlavor {
	return gpuFlavor{name, func(t *testing.T, c *harness.RuncContainer) gpuTask {
		c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
		return &runcTask{c: c}
	}}
}

// runcTask is a RuncContainer with its checkpoint image kept between
// checkpoint and restore.
type runcTask struct {
	c   *harness.RuncContainer
	img string
}

func (r *runcTask) Output() string    { return r.c.Log.String() }
func (r *runcTask) signal(sig string) { r.c.Kill(sig) }
func (r *runcTask) PID() int          { return r.c.PID() }

func (r *runcTask) Checkpoint() time.Duration {
	r.img = filepath.Join(r.c.T.TempDir(), "img")
	return r.c.Checkpoint(r.img)
}

func (r *runcTask) Restore() time.Duration {
	d := r.c.Restore(r.img)
	_ = os.RemoveAll(r.img) // images are GBs; the restored process no longer needs it
	return d
}

// shimTask is a container of containerd on the cryo runtime, made from a
// runc bundle: its spec with the rootfs directory as the root (no image,
// no snapshot), its output in a log file.
type shimTask struct {
	t    *testing.T
	d    *harness.Daemon
	id   string
	ref  string // the last checkpoint image
	prev string // output of the tasks before the last restore
}

func startShimTask(t *testing.T, d *harness.Daemon, id, bundle string) *shimTask {
	t.Helper()
	s := readSpec(t, bundle)
	s.Root.Path = filepath.Join(bundle, s.Root.Path)
	ctx := harness.NamespacedCtx()
	c, err := d.Client.NewContainer(ctx, id, client.WithSpec(s), client.WithRuntime(harness.CryoRuntime, nil))
	if err != nil {
		t.Fatalf("new container %s: %v", id, err)
	}
	_ = os.MkdirAll(filepath.Join(d.Dir, "logs"), 0o755)
	task, err := c.NewTask(ctx, cio.LogFile(d.LogPath(id)))
	if err != nil {
		t.Fatalf("create task %s: %v\n%s", id, err, harness.LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start task %s: %v", id, err)
	}
	return &shimTask{t: t, d: d, id: id}
}

func (s *shimTask) Output() string    { return s.prev + harness.ReadFile(s.d.LogPath(s.id)) }
func (s *shimTask) signal(sig string) { s.d.Ctr("task", "kill", "--signal", sig, s.id) }
func (s *shimTask) PID() int          { return s.d.TaskPid(s.id) }

// checkpoint is `ctr task checkpoint --exit` (through ctr 2.x, which passes
// --exit to a runtime of another name than runc's).
func (s *shimTask) Checkpoint() time.Duration {
	start := time.Now()
	s.ref, _ = s.d.TaskCheckpoint(s.id, "--exit")
	d := time.Since(start) - 1100*time.Millisecond // taskCheckpoint waits a second first
	s.d.WaitStopped(s.id)
	return d
}

// restore starts a task of the same container from the checkpoint image,
// then deletes the image from containerd's store.
func (s *shimTask) Restore() time.Duration {
	s.prev += harness.ReadFile(s.d.LogPath(s.id))
	_ = os.Remove(s.d.LogPath(s.id))
	start := time.Now()
	s.d.RestoreTask(s.ref, s.id)
	d := time.Since(start)
	s.d.Ctr("images", "rm", "--sync", s.ref)
	return d
}
