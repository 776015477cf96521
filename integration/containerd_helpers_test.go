package integration

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
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// logPath is where a container's stdout goes.
func (d *daemon) logPath(id string) string { return filepath.Join(d.dir, "logs", id+".log") }

// runApp starts fakecuda-app (a tick every 100 ms) in a container made as
// `ctr run` makes one (newContainer), given GPU 0, its output in a log
// file, and waits for its first ticks. opts edit the spec further.
func (d *daemon) runApp(id string, opts ...oci.SpecOpts) {
	d.t.Helper()
	d.startApp(d.newContainerWith(id, nil, opts...))
}

// ticks reads the tick numbers of a log; a tick that is not state=running
// or whose pattern check failed fails the test.
func ctrdTicks(t testing.TB, path string) []int {
	t.Helper()
	data, _ := os.ReadFile(path)
	return fakeTicks(t, path, string(data))
}

func ctrdLastTick(t testing.TB, path string) int {
	ts := ctrdTicks(t, path)
	if len(ts) == 0 {
		return 0
	}
	return ts[len(ts)-1]
}

// waitTicks waits until the container's log shows n more ticks than now.
func (d *daemon) waitTicks(id string, n int) {
	d.t.Helper()
	d.waitTicksIn(d.logPath(id), n)
}

func (d *daemon) waitTicksIn(path string, n int) {
	d.t.Helper()
	start := len(ctrdTicks(d.t, path))
	waitFor(d.t, 20*time.Second, fmt.Sprintf("%d ticks in %s", n, path), func() bool {
		return len(ctrdTicks(d.t, path)) >= start+n
	})
}

// taskCheckpoint runs `ctr task checkpoint` and returns the image name and
// the last tick printed before it. ctr names the image after the second,
// so calls are kept a second apart.
func (d *daemon) taskCheckpoint(id string, args ...string) (string, int) {
	d.t.Helper()
	time.Sleep(1100 * time.Millisecond)
	before := ctrdLastTick(d.t, d.logPath(id))
	full := append(append([]string{"task", "checkpoint"}, args...), id)
	ctr := filepath.Join(d.bin, "ctr")
	if len(args) > 0 {
		ctr = d.ctrWithOptions() // options such as --exit: see ctrWithOptions
	}
	out, err := d.ctrBinErr(ctr, full...)
	if err != nil {
		d.t.Fatalf("ctr %s: %v\n%s\n%s", strings.Join(full, " "), err, out, lastLines(d.log(), 30))
	}
	lines := strings.Fields(strings.TrimSpace(out))
	if len(lines) == 0 {
		d.t.Fatalf("ctr task checkpoint %s printed no image name", id)
	}
	return lines[len(lines)-1], before
}

// containerCheckpoint runs `ctr container checkpoint --task --rw` and
// returns the last tick printed before it.
func (d *daemon) containerCheckpoint(id, ref string) int {
	d.t.Helper()
	before := ctrdLastTick(d.t, d.logPath(id))
	d.ctr("container", "checkpoint", "--task", "--rw", id, ref)
	return before
}

// restoreTask restores a `ctr task checkpoint` image through the Go client:
// into container id if it exists (its task deleted), else into a new
// container of the test image (a clone). Its output goes to logPath(id).
func (d *daemon) restoreTask(ref, id string) {
	d.t.Helper()
	ctx := namespacedCtx()
	ckpt, err := d.client.GetImage(ctx, ref)
	if err != nil {
		d.t.Fatalf("get checkpoint %s: %v", ref, err)
	}
	c, err := d.client.LoadContainer(ctx, id)
	if err != nil {
		c = d.newContainer(id)
	}
	task, err := c.NewTask(ctx, cio.LogFile(d.logPath(id)), client.WithTaskCheckpoint(ckpt))
	if err != nil {
		d.t.Fatalf("restore %s from %s: %v\n%s", id, ref, err, lastLines(d.log(), 30))
	}
	if err := task.Start(ctx); err != nil {
		d.t.Fatalf("start restored %s: %v\n%s", id, err, lastLines(d.log(), 30))
	}
}

// newContainer creates a container of the test image on the cryo runtime,
// with optional runtime options (runc options: BinaryName, …).
func (d *daemon) newContainer(id string, runtimeOpts ...any) client.Container {
	d.t.Helper()
	var ropts any
	if len(runtimeOpts) > 0 {
		ropts = runtimeOpts[0]
	}
	return d.newContainerWith(id, ropts)
}

// newContainerWith creates a container of the test image running
// fakecuda-app on the cryo runtime with runtime options ropts, given GPU
// 0, its spec edited by opts (see newContainerOf).
func (d *daemon) newContainerWith(id string, ropts any, opts ...oci.SpecOpts) client.Container {
	d.t.Helper()
	return d.newContainerOf(testImage, id, ropts, append([]oci.SpecOpts{oci.WithProcessArgs("/bin/fakecuda-app", "100")}, opts...)...)
}

// newContainerOf creates a container of image on the cryo runtime with
// runtime options ropts, its spec made as `ctr run` makes one
// (containerd's default spec and devices, the image's config), given GPU
// 0's stand-in node, then edited by opts. ctr's --device can give a node
// only at its host path, which a stand-in for /dev/nvidia0 has not.
func (d *daemon) newContainerOf(image, id string, ropts any, opts ...oci.SpecOpts) client.Container {
	d.t.Helper()
	ctx := namespacedCtx()
	img, err := d.client.GetImage(ctx, image)
	if err != nil {
		d.t.Fatal(err)
	}
	spec := append([]oci.SpecOpts{oci.WithDefaultUnixDevices, oci.WithImageConfig(img), withStandIns(0)}, opts...)
	c, err := d.client.NewContainer(ctx, id,
		client.WithImage(img), client.WithNewSnapshot(id+"-snap", img),
		client.WithRuntime(cryoRuntime, ropts), client.WithNewSpec(spec...))
	if err != nil {
		d.t.Fatalf("new container %s: %v", id, err)
	}
	return c
}

// startApp starts a task of a container made by newContainer.
func (d *daemon) startApp(c client.Container) {
	d.t.Helper()
	_ = os.MkdirAll(filepath.Join(d.dir, "logs"), 0o755)
	ctx := namespacedCtx()
	task, err := c.NewTask(ctx, cio.LogFile(d.logPath(c.ID())))
	if err != nil {
		d.t.Fatal(err)
	}
	if err := task.Start(ctx); err != nil {
		d.t.Fatal(err)
	}
	d.waitTicks(c.ID(), 3)
}

// attach copies the stdout of a task that `ctr container restore` started
// (ctr has exited; its FIFOs remain) into logPath(id).
func (d *daemon) attach(id string) {
	d.t.Helper()
	ctx := namespacedCtx()
	c, err := d.client.LoadContainer(ctx, id)
	if err != nil {
		d.t.Fatal(err)
	}
	f, err := os.Create(d.logPath(id))
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { f.Close() })
	if _, err := c.Task(ctx, cio.NewAttach(cio.WithStreams(nil, f, f))); err != nil {
		d.t.Fatalf("attach to %s: %v", id, err)
	}
}

// task loads a container's task, failing the test if there is none.
func (d *daemon) task(id string) client.Task {
	d.t.Helper()
	ctx := namespacedCtx()
	c, err := d.client.LoadContainer(ctx, id)
	if err != nil {
		d.t.Fatal(err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		d.t.Fatal(err)
	}
	return task
}

// taskStatus is the task's status as containerd reports it.
func (d *daemon) taskStatus(id string) client.ProcessStatus {
	d.t.Helper()
	st, err := d.task(id).Status(namespacedCtx())
	if err != nil {
		d.t.Fatal(err)
	}
	return st.Status
}

// remove kills and deletes a container, to keep the 2-core machine free.
func (d *daemon) remove(id string) {
	ctx := namespacedCtx()
	c, err := d.client.LoadContainer(ctx, id)
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
func (d *daemon) waitStopped(id string) {
	d.t.Helper()
	var st client.ProcessStatus
	defer func() {
		if d.t.Failed() {
			d.t.Logf("%s: last status %q\n%s", id, st, lastLines(d.log(), 30))
		}
	}()
	waitFor(d.t, 20*time.Second, id+" stopped", func() bool {
		st = d.taskStatus(id)
		return st == client.Stopped
	})
	ctx := namespacedCtx()
	c, _ := d.client.LoadContainer(ctx, id)
	task, err := c.Task(ctx, nil)
	if err == nil {
		_, _ = task.Delete(ctx)
	}
}

// checkpointManifest reads cryo's GPU manifest out of the CRIU tar of a
// checkpoint image.
func (d *daemon) checkpointManifest(ref string) *manifest.Manifest {
	d.t.Helper()
	ctx := namespacedCtx()
	img, err := d.client.ImageService().Get(ctx, ref)
	if err != nil {
		d.t.Fatal(err)
	}
	cs := d.client.ContentStore()
	idxData, err := content.ReadBlob(ctx, cs, img.Target)
	if err != nil {
		d.t.Fatal(err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(idxData, &idx); err != nil {
		d.t.Fatal(err)
	}
	for _, m := range idx.Manifests {
		if m.MediaType == images.MediaTypeContainerd1Checkpoint {
			return d.manifestInBlob(m)
		}
	}
	d.t.Fatalf("checkpoint %s has no %s blob", ref, images.MediaTypeContainerd1Checkpoint)
	return nil
}

func (d *daemon) manifestInBlob(desc ocispec.Descriptor) *manifest.Manifest {
	d.t.Helper()
	ra, err := d.client.ContentStore().ReaderAt(namespacedCtx(), desc)
	if err != nil {
		d.t.Fatal(err)
	}
	defer ra.Close()
	tr := tar.NewReader(bufio.NewReader(content.NewReader(ra)))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.t.Fatal(err)
		}
		if filepath.Base(hdr.Name) == manifest.ManifestName {
			var m manifest.Manifest
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				d.t.Fatal(err)
			}
			return &m
		}
	}
	d.t.Fatalf("no %s in the CRIU tar", manifest.ManifestName)
	return nil
}
