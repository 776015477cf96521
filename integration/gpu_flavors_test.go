package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
)

// gpuTask is a workload container driven through one of cryo's front ends,
// so that one test body covers both: cryo-runc (runcTask) and containerd
// with the cryo shim (shimTask). Checkpoints stop the container (--exit);
// a restore brings it back under the same name, its output appended.
type gpuTask interface {
	output() string
	checkpoint() time.Duration
	restore() time.Duration
	signal(sig string)
	pid() int
}

// gpuFlavor starts a runc bundle (config.json and rootfs, as built by
// pyContainer or gpuRootfs and gpuSpec) through one front end.
type gpuFlavor struct {
	name  string
	start func(t *testing.T, c *runcContainer) gpuTask
}

// gpuFlavors are cryo-runc and the containerd shim; each test that takes
// them runs once per flavor, as a subtest named after it.
func gpuFlavors() []gpuFlavor {
	return []gpuFlavor{
		runcFlavor("cryo-runc"),
		{"shim", func(t *testing.T, c *runcContainer) gpuTask {
			d := startDaemonWith(t, ctrdVersions[1], true)
			return startShimTask(t, d, c.id, c.bundle)
		}},
	}
}

// runcFlavor runs the bundle with the runcContainer's own runc (cryo-runc,
// or plain runc for a baseline).
func runcFlavor(name string) gpuFlavor {
	return gpuFlavor{name, func(t *testing.T, c *runcContainer) gpuTask {
		c.start("run", "-d", "--bundle", c.bundle, c.id)
		return &runcTask{c: c}
	}}
}

// runcTask is a runcContainer with its checkpoint image kept between
// checkpoint and restore.
type runcTask struct {
	c   *runcContainer
	img string
}

func (r *runcTask) output() string    { return r.c.log.String() }
func (r *runcTask) signal(sig string) { r.c.kill(sig) }
func (r *runcTask) pid() int          { return r.c.pid() }

func (r *runcTask) checkpoint() time.Duration {
	r.img = filepath.Join(r.c.t.TempDir(), "img")
	return r.c.checkpoint(r.img)
}

func (r *runcTask) restore() time.Duration {
	d := r.c.restore(r.img)
	_ = os.RemoveAll(r.img) // images are GBs; the restored process no longer needs it
	return d
}

// shimTask is a container of containerd on the cryo runtime, made from a
// runc bundle: its spec with the rootfs directory as the root (no image,
// no snapshot), its output in a log file.
type shimTask struct {
	t    *testing.T
	d    *daemon
	id   string
	ref  string // the last checkpoint image
	prev string // output of the tasks before the last restore
}

func startShimTask(t *testing.T, d *daemon, id, bundle string) *shimTask {
	t.Helper()
	s := readSpec(t, bundle)
	s.Root.Path = filepath.Join(bundle, s.Root.Path)
	ctx := namespacedCtx()
	c, err := d.client.NewContainer(ctx, id, client.WithSpec(s), client.WithRuntime(cryoRuntime, nil))
	if err != nil {
		t.Fatalf("new container %s: %v", id, err)
	}
	_ = os.MkdirAll(filepath.Join(d.dir, "logs"), 0o755)
	task, err := c.NewTask(ctx, cio.LogFile(d.logPath(id)))
	if err != nil {
		t.Fatalf("create task %s: %v\n%s", id, err, lastLines(d.log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		t.Fatalf("start task %s: %v", id, err)
	}
	return &shimTask{t: t, d: d, id: id}
}

func (s *shimTask) output() string    { return s.prev + readFile(s.d.logPath(s.id)) }
func (s *shimTask) signal(sig string) { s.d.ctr("task", "kill", "--signal", sig, s.id) }
func (s *shimTask) pid() int          { return s.d.taskPid(s.id) }

// checkpoint is `ctr task checkpoint --exit` (through ctr 2.x, which passes
// --exit to a runtime of another name than runc's).
func (s *shimTask) checkpoint() time.Duration {
	start := time.Now()
	s.ref, _ = s.d.taskCheckpoint(s.id, "--exit")
	d := time.Since(start) - 1100*time.Millisecond // taskCheckpoint waits a second first
	s.d.waitStopped(s.id)
	return d
}

// restore starts a task of the same container from the checkpoint image,
// then deletes the image from containerd's store.
func (s *shimTask) restore() time.Duration {
	s.prev += readFile(s.d.logPath(s.id))
	_ = os.Remove(s.d.logPath(s.id))
	start := time.Now()
	s.d.restoreTask(s.ref, s.id)
	d := time.Since(start)
	s.d.ctr("images", "rm", "--sync", s.ref)
	return d
}
