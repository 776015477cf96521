package harness

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/cryo-gpu/cryo/internal/manifest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// logPath is where a container's stdout goes.
func (d *Daemon) LogPath(id string) string { return filepath.Join(d.Dir, "logs", id+".log") }

// runApp starts fakecuda-app (a tick every 100 ms) in a container made as
// `ctr run` makes one (newContainer), given GPU 0, its output in a log
// file, and waits for its first ticks. opts edit the spec further.
func (d *Daemon) RunApp(id string, opts ...oci.SpecOpts) {
	d.T.Helper()
	d.StartApp(d.NewContainerWith(id, nil, opts...))
}

// ticks reads the tick numbers of a log; a tick that is not state=running
// or whose pattern check failed fails the test.
func CtrdTicks(t testing.TB, path string) []int {
	t.Helper()
	data, _ := os.ReadFile(path)
	return FakeTicks(t, path, string(data))
}

func CtrdLastTick(t testing.TB, path string) int {
	ts := CtrdTicks(t, path)
	if len(ts) == 0 {
		return 0
	}
	return ts[len(ts)-1]
}

// WaitTicks waits until the container's log shows n more ticks than now.
func (d *Daemon) WaitTicks(id string, n int) {
	d.T.Helper()
	d.WaitTicksIn(d.LogPath(id), n)
}

func (d *Daemon) WaitTicksIn(path string, n int) {
	d.T.Helper()
	start := len(CtrdTicks(d.T, path))
	WaitFor(d.T, 20*time.Second, fmt.Sprintf("%d ticks in %s", n, path), func() bool {
		return len(CtrdTicks(d.T, path)) >= start+n
	})
}

// taskCheckpoint runs `ctr task checkpoint` and returns the image name and
// the last tick printed before it. ctr names the image after the second,
// so calls are kept a second apart.
func (d *Daemon) TaskCheckpoint(id string, args ...string) (string, int) {
	d.T.Helper()
	time.Sleep(1100 * time.Millisecond)
	before := CtrdLastTick(d.T, d.LogPath(id))
	full := append(append([]string{"task", "checkpoint"}, args...), id)
	ctr := filepath.Join(d.Bin, "ctr")
	if len(args) > 0 {
		ctr = d.CtrWithOptions() // options such as --exit: see ctrWithOptions
	}
	out, err := d.CtrBinErr(ctr, full...)
	if err != nil {
		d.T.Fatalf("ctr %s: %v\n%s\n%s", strings.Join(full, " "), err, out, LastLines(d.Log(), 30))
	}
	lines := strings.Fields(strings.TrimSpace(out))
	if len(lines) == 0 {
		d.T.Fatalf("ctr task checkpoint %s printed no image name", id)
	}
	return lines[len(lines)-1], before
}

// containerCheckpoint runs `ctr container checkpoint --task --rw` and
// returns the last tick printed before it.
func (d *Daemon) ContainerCheckpoint(id, ref string) int {
	d.T.Helper()
	before := CtrdLastTick(d.T, d.LogPath(id))
	d.Ctr("container", "checkpoint", "--task", "--rw", id, ref)
	return before
}

// restoreTask restores a `ctr task checkpoint` image through the Go client:
// into container id if it exists (its task deleted), else into a new
// container of the test image (a clone). Its output goes to logPath(id).
func (d *Daemon) RestoreTask(ref, id string) {
	d.T.Helper()
	ctx := NamespacedCtx()
	ckpt, err := d.Client.GetImage(ctx, ref)
	if err != nil {
		d.T.Fatalf("get checkpoint %s: %v", ref, err)
	}
	c, err := d.Client.LoadContainer(ctx, id)
	if err != nil {
		c = d.NewContainer(id)
	}
	task, err := c.NewTask(ctx, cio.LogFile(d.LogPath(id)), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		d.T.Fatalf("restore %s from %s: %v\n%s", id, ref, err, LastLines(d.Log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.T.Fatalf("start restored %s: %v\n%s", id, err, LastLines(d.Log(), 30))
	}
}

// newContainer creates a container of the test image on the cryo runtime,
// with optional runtime options (runc options: BinaryName, …).
func (d *Daemon) NewContainer(id string, runtimeOpts ...any) client.Container {
	d.T.Helper()
	var ropts any
	if len(runtimeOpts) > 0 {
		ropts = runtimeOpts[0]
	}
	return d.NewContainerWith(id, ropts)
}

// newContainerWith creates a container of the test image running
// fakecuda-app on the cryo runtime with runtime options ropts, given GPU
// 0, its spec edited by opts (see newContainerOf).
func (d *Daemon) NewContainerWith(id string, ropts any, opts ...oci.SpecOpts) client.Container {
	d.T.Helper()
	return d.NewContainerOf(TestImage, id, ropts, append([]oci.SpecOpts{oci.WithProcessArgs("/bin/fakecuda-app", "100")}, opts...)...)
}

// newContainerOf creates a container of image on the cryo runtime with
// runtime options ropts, its spec made as `ctr run` makes one
// (containerd's default spec and devices, the image's config), given GPU
// 0's stand-in node, then edited by opts. ctr's --device can give a node
// only at its host path, which a stand-in for /dev/nvidia0 has not.
func (d *Daemon) NewContainerOf(image, id string, ropts any, opts ...oci.SpecOpts) client.Container {
	d.T.Helper()
	ctx := NamespacedCtx()
	img, err := d.Client.GetImage(ctx, image)
	if err != nil {
		d.T.Fatal(err)
	}
	spec := append([]oci.SpecOpts{oci.WithDefaultUnixDevices, oci.WithImageConfig(img), WithStandIns(0)}, opts...)
	c, err := d.Client.NewContainer(ctx, id,
		client.WithImage(img), client.WithNewSnapshot(id+"-snap", img),
		client.WithRuntime(CryoRuntime, ropts), client.WithNewSpec(spec...))
	if err != nil {
		d.T.Fatalf("new container %s: %v", id, err)
	}
	return c
}

// startApp starts a task of a container made by newContainer.
func (d *Daemon) StartApp(c client.Container) {
	d.T.Helper()
	_ = os.MkdirAll(filepath.Join(d.Dir, "logs"), 0o755)
	ctx := NamespacedCtx()
	task, err := c.NewTask(ctx, cio.LogFile(d.LogPath(c.ID())))
	if err != nil {
		d.T.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		d.T.Fatal(err)
	}
	d.WaitTicks(c.ID(), 3)
}

// attach copies the stdout of a task that `ctr container restore` started
// (ctr has exited; its FIFOs remain) into logPath(id).
func (d *Daemon) Attach(id string) {
	d.T.Helper()
	ctx := NamespacedCtx()
	c, err := d.Client.LoadContainer(ctx, id)
	if err != nil {
		d.T.Fatal(err)
	}
	f, err := os.Create(d.LogPath(id))
	if err != nil {
		d.T.Fatal(err)
	}
	d.T.Cleanup(func() { f.Close() })
	if _, err := c.Task(ctx, cio.NewAttach(cio.WithStreams(nil, f, f))); err != nil {
		d.T.Fatalf("attach to %s: %v", id, err)
	}
}

// task loads a container's task, failing the test if there is none.
func (d *Daemon) Task(id string) client.Task {
	d.T.Helper()
	ctx := NamespacedCtx()
	c, err := d.Client.LoadContainer(ctx, id)
	if err != nil {
		d.T.Fatal(err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		d.T.Fatal(err)
	}
	return task
}

// taskStatus is the task's status as containerd reports it.
func (d *Daemon) TaskStatus(id string) client.ProcessStatus {
	d.T.Helper()
	st, err := d.Task(id).Status(NamespacedCtx())
	if err != nil {
		d.T.Fatal(err)
	}
	return st.Status
}

// remove kills and deletes a container, to keep the 2-core machine free.
func (d *Daemon) Remove(id string) {
	ctx := NamespacedCtx()
	c, err := d.Client.LoadContainer(ctx, id)
	if err != nil {
		return
	}
	if task, err := c.Task(ctx, nil); err == nil {
		ch, _ := task.Wait(ctx)
		_ = task.Kill(ctx, syscall.SIGKILL)
		if ch != nil {
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
			}
		}
		_, _ = task.Delete(ctx)
	}
	_ = c.Delete(ctx, client.WithSnapshotCleanup)
}

// waitExit waits for a task to stop (after checkpoint --exit) and deletes it.
func (d *Daemon) WaitStopped(id string) {
	d.T.Helper()
	var st client.ProcessStatus
	defer func() {
		if d.T.Failed() {
			d.T.Logf("%s: last status %q\n%s", id, st, LastLines(d.Log(), 30))
		}
	}()
	WaitFor(d.T, 20*time.Second, id+" stopped", func() bool {
		st = d.TaskStatus(id)
		return st == client.Stopped
	})
	ctx := NamespacedCtx()
	c, _ := d.Client.LoadContainer(ctx, id)
	task, err := c.Task(ctx, nil)
	if err == nil {
		_, _ = task.Delete(ctx)
	}
}

// checkpointManifest reads cryo's GPU manifest out of the CRIU tar of a
// checkpoint image.
func (d *Daemon) CheckpointManifest(ref string) *manifest.Manifest {
	d.T.Helper()
	ctx := NamespacedCtx()
	img, err := d.Client.ImageService().Get(ctx, ref)
	if err != nil {
		d.T.Fatal(err)
	}
	cs := d.Client.ContentStore()
	idxData, err := content.ReadBlob(ctx, cs, img.Target)
	if err != nil {
		d.T.Fatal(err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(idxData, &idx); err != nil {
		d.T.Fatal(err)
	}
	for _, m := range idx.Manifests {
		if m.MediaType == images.MediaTypeContainerd1Checkpoint {
			return d.manifestInBlob(m)
		}
	}
	d.T.Fatalf("checkpoint %s has no %s blob", ref, images.MediaTypeContainerd1Checkpoint)
	return nil
}

func (d *Daemon) manifestInBlob(desc ocispec.Descriptor) *manifest.Manifest {
	d.T.Helper()
	ra, err := d.Client.ContentStore().ReaderAt(NamespacedCtx(), desc)
	if err != nil {
		d.T.Fatal(err)
	}
	defer ra.Close()
	tr := tar.NewReader(bufio.NewReader(content.NewReader(ra)))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.T.Fatal(err)
		}
		if filepath.Base(hdr.Name) == manifest.ManifestName {
			var m manifest.Manifest
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				d.T.Fatal(err)
			}
			return &m
		}
	}
	d.T.Fatalf("no %s in the CRIU tar", manifest.ManifestName)
	return nil
}
