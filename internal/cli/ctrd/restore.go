package ctrd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	ctrdcontent "github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/confine"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/report"
)

// RestoreOptions configures Restore.
type RestoreOptions struct {
	Options
	Name        string               // the new container's id; default: the checkpointed container's (checkpointedName)
	Runtime     string               // default: io.containerd.cryo.v2, never the recorded runtime
	Snapshotter string               // default: containerd's, never the recorded one
	LogPath     string               // the task's stdout and stderr; "" discards them
	Log         func(string, ...any) // progress lines; nil: silent
	// GPUs, when set, are the restored container's GPUs in place of the
	// recorded ones (items of ResolveGPUs). Inventory reads the host's
	// GPUs for items given by index or UUID.
	GPUs      []string
	Inventory Inventory
	// Mounts are the user's mounts (ParseMount), the only ones the new
	// container gets besides containerd's defaults.
	Mounts []specs.Mount
	// NetHost shares the host's network namespace (the user's grant, as
	// `ctr run --net-host`): the restore of a container that shared it
	// is refused without it.
	NetHost bool
	// Limits bound the rootfs diff's entries (archive.Limits); zero: the
	// defaults.
	Limits archive.Limits
}

// Restored is the container that Restore created.
type Restored struct {
	ID        string
	Namespace string
	PID       uint32
}

// Restore restores an unpacked (verified) containerd checkpoint
// in dir into containerd: it writes the rw layer (and, for a runtime that
// cannot name a directory, the CRIU images: see checkpointOpt) into the
// daemon's content store under a lease, creates container o.Name from
// the base image (which must already be in the namespace) and the rw
// layer, with a new spec made from the base image and o alone (see
// carried), on o.Runtime, and starts its task from the checkpoint. The
// shim checks the GPUs and resumes CUDA.
func Restore(ctx context.Context, dir string, o RestoreOptions) (*Restored, error) {
	meta, err := ociimage.ReadContainerdMeta(dir)
	if err != nil {
		return nil, err
	}
	rec, err := readCarried(dir)
	if err != nil {
		return nil, err
	}
	o.Name = cmp.Or(o.Name, checkpointedName(dir, meta))
	if err := needsHostNet(dir, o); err != nil {
		return nil, err
	}
	o.Runtime = cmp.Or(o.Runtime, CryoRuntime)
	r := &ctrdRestore{o: o, meta: meta, dir: dir, logf: o.Log}
	if r.logf == nil {
		r.logf = func(string, ...any) {}
	}
	gpus, err := r.gpuNodes(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("restore container %s: give it GPUs: %w", o.Name, err)
	}
	if meta.RootfsImageName == "" {
		return nil, fmt.Errorf("the checkpoint of %s records no base image; cryo restores only containers created from an image: %w", meta.Name, ErrBaseImage)
	}
	r.noteRuntime()
	return r.run(ctx, specOpts(rec, grants{mounts: o.Mounts, netHost: o.NetHost}, gpus))
}

// noteRuntime says so when the restore does not run on the recorded
// runtime: it tells where the checkpoint ran, and is no instruction.
func (r *ctrdRestore) noteRuntime() {
	if m := r.meta; m.OCIRuntime != "" && m.OCIRuntime != r.o.Runtime {
		r.logf("the checkpoint was taken on runtime %s; restoring on %s (pass --runtime to choose)", m.OCIRuntime, r.o.Runtime)
	}
}

// noteSnapshotter does the same for the snapshotter, once containerd has
// named the one it chose.
func (r *ctrdRestore) noteSnapshotter(ctx context.Context, ctr client.Container) {
	info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata)
	if m := r.meta; err == nil && m.Snapshotter != "" && m.Snapshotter != info.Snapshotter {
		r.logf("the checkpoint was taken on snapshotter %s; restoring on %s (pass --snapshotter to choose)", m.Snapshotter, info.Snapshotter)
	}
}

type ctrdRestore struct {
	o    RestoreOptions
	meta ociimage.ContainerdMeta
	dir  string
	c    *client.Client
	logf func(string, ...any)

	// What the steps made, for the next step and for undo.
	img   client.Image
	lease *leases.Lease
	criu  client.NewTaskOpts
	rw    *ocispec.Descriptor
	ctr   client.Container
	task  client.Task
	res   *Restored
	// reached is the step under way, or the last one taken: undo looks
	// for what a call cut off in it made without returning it.
	reached string
}

// run takes the restore's steps (restoresteps.go); a failure or an
// interrupt removes what they made in containerd.
func (r *ctrdRestore) run(ctx context.Context, spec func(client.Image) []oci.SpecOpts) (res *Restored, err error) {
	c, ctx, err := r.o.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r.c = c
	defer func() {
		left := error(nil)
		if err != nil {
			left = r.undo(ctx)
		}
		var in *Interrupted
		switch {
		case errors.As(err, &in):
			in.Left = left
		case left != nil:
			err = fmt.Errorf("%w; %w", err, left)
		}
		if r.lease != nil {
			_ = c.LeasesService().Delete(context.WithoutCancel(ctx), *r.lease)
		}
	}()
	steps := r.steps(spec)
	leased := func(ctx context.Context) context.Context {
		if r.lease == nil {
			return ctx
		}
		return leases.WithLease(ctx, r.lease.ID)
	}
	for i := range steps {
		do := steps[i].do
		steps[i].do = func(ctx context.Context) error { return do(leased(ctx)) }
	}
	if err := r.runSteps(ctx, steps); err != nil {
		return nil, err
	}
	return r.res, nil
}

// baseImage finds the image the container was created from, unpacked for
// the snapshotter. cryo does not pull it: registries, credentials and
// platforms of base images are the node's business.
func (r *ctrdRestore) baseImage(ctx context.Context) (client.Image, error) {
	ref := r.meta.RootfsImageName
	img, err := r.c.GetImage(ctx, ref)
	if errdefs.IsNotFound(err) {
		return nil, missingBaseImage(r.o.Options, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("base image %s: %w", ref, err)
	}
	if r.meta.RootfsImage != "" && img.Target().Digest.String() != r.meta.RootfsImage {
		r.logf("warning: base image %s is %s here, %s at checkpoint; the rootfs diff may not fit", ref, img.Target().Digest, r.meta.RootfsImage)
	}
	ok, err := img.IsUnpacked(ctx, r.o.Snapshotter)
	if err == nil && !ok {
		r.logf("unpacking base image %s", ref)
		err = img.Unpack(ctx, r.o.Snapshotter)
	}
	if err != nil {
		return nil, fmt.Errorf("unpack base image %s: %w", ref, err)
	}
	return img, nil
}

// checkpointOpt is how the task finds the CRIU images. Runtimes that take
// runc's options restore from the verified directory in place
// (CriuImagePath): containerd 2.x hands the path to any runtime, 1.7 to
// runc-named ones, and cryo's shim takes the option itself on 1.7. Any
// other runtime gets the images through the content store, as `ctr
// container restore` does: a tar into the store, which containerd unpacks
// again into a directory of its own, and the shim hashes that copy anew.
func (r *ctrdRestore) checkpointOpt(ctx context.Context) (client.NewTaskOpts, error) {
	if takesImagePath(r.o.Runtime) {
		r.logf("restoring from %s in place (no copy into containerd's content store)", ociimage.CRIUDir(r.dir))
		return client.WithRestoreImagePath(ociimage.CRIUDir(r.dir)), nil
	}
	criu, err := r.writeCRIU(ctx)
	if err != nil {
		return nil, err
	}
	return func(_ context.Context, _ *client.Client, ti *client.TaskInfo) error {
		ti.Checkpoint = &types.Descriptor{MediaType: criu.MediaType, Digest: criu.Digest.String(), Size: criu.Size}
		return nil
	}, nil
}

// takesImagePath reports whether a restore on runtime can name the CRIU
// directory through runc's CriuImagePath option.
func takesImagePath(runtime string) bool {
	return runtime == CryoRuntime || strings.HasPrefix(runtime, "io.containerd.runc.")
}

// writeCRIU tars the verified CRIU directory into the content store.
func (r *ctrdRestore) writeCRIU(ctx context.Context) (ocispec.Descriptor, error) {
	files, err := ociimage.Files(ociimage.CRIUDir(r.dir))
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive.Write(pw, files)) }()
	defer pr.Close()
	d, err := r.ingest(ctx, pr, images.MediaTypeContainerd1Checkpoint, "criu")
	if err != nil {
		return d, fmt.Errorf("write the CRIU images into containerd's content store: %w", err)
	}
	return d, nil
}

// writeRW puts the rw layer (an uncompressed layer tar) into the store.
func (r *ctrdRestore) writeRW(ctx context.Context) (ocispec.Descriptor, bool, error) {
	f, err := os.Open(filepath.Join(r.dir, ociimage.RootfsDiffName))
	if os.IsNotExist(err) {
		return ocispec.Descriptor{}, false, nil
	}
	if err != nil {
		return ocispec.Descriptor{}, false, err
	}
	defer f.Close()
	// Checked whole before containerd applies any of it.
	b := archive.Bounded(ctx, f, archive.Options{Limits: r.o.Limits, Part: "the rootfs diff (" + ociimage.RootfsDiffName + ")"})
	defer b.Close()
	d, err := r.ingest(ctx, b, ocispec.MediaTypeImageLayer, "rw")
	if err != nil {
		return d, false, fmt.Errorf("write the rootfs diff into containerd's content store: %w", err)
	}
	return d, true, nil
}

// blobWriteSize is the size of one write into containerd's content store.
const blobWriteSize = 1 << 20

func (r *ctrdRestore) ingest(ctx context.Context, rd io.Reader, mediaType, what string) (ocispec.Descriptor, error) {
	ref := fmt.Sprintf("cryo-restore-%s-%s-%d", r.o.Name, what, time.Now().UnixNano())
	w, err := r.c.ContentStore().Writer(ctx, ctrdcontent.WithRef(ref))
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer w.Close()
	// One write is one gRPC message to containerd: large ones, not io.Copy's
	// 32 KiB (the struct hides a WriterTo, which would bring its own buffer).
	n, err := io.CopyBuffer(w, struct{ io.Reader }{rd}, make([]byte, blobWriteSize))
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := w.Commit(ctx, n, ""); err != nil && !errdefs.IsAlreadyExists(err) {
		return ocispec.Descriptor{}, err
	}
	return ocispec.Descriptor{MediaType: mediaType, Digest: w.Digest(), Size: n}, nil
}

// applyRW applies the rw layer onto the container's new snapshot, as
// containerd's WithRestoreRW does.
func applyRW(rw ocispec.Descriptor) client.NewContainerOpts {
	return func(ctx context.Context, c *client.Client, ctr *containers.Container) error {
		mounts, err := c.SnapshotService(ctr.Snapshotter).Mounts(ctx, ctr.SnapshotKey)
		if err != nil {
			return err
		}
		if _, err := c.DiffService().Apply(ctx, rw, mounts); err != nil {
			return fmt.Errorf("apply the rootfs diff: %w", err)
		}
		return nil
	}
}

// newTask creates the task from the checkpoint: the shim checks it
// against this host, and runs nothing yet.
func (r *ctrdRestore) newTask(ctx context.Context, ctr client.Container, withCheckpoint client.NewTaskOpts) (client.Task, error) {
	if r.o.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(r.o.LogPath), 0o755); err != nil {
			return nil, err
		}
	}
	creator := restoredIO(r.o.LogPath)
	r.logf("restoring %s from the checkpoint (runtime %s)", ctr.ID(), r.o.Runtime)
	task, err := ctr.NewTask(ctx, creator, withCheckpoint)
	if err != nil {
		return nil, r.taskErr("restore task", ctr.ID(), err, "read the shim's lines in containerd's log")
	}
	return task, nil
}

// startTask starts the task: the shim runs `runc restore` and resumes
// CUDA. A failed start is deleted by undo.
func (r *ctrdRestore) startTask(ctx context.Context, ctr client.Container, task client.Task) (*Restored, error) {
	if err := task.Start(ctx); err != nil {
		return nil, r.taskErr("start restored task", ctr.ID(), err, "read the shim's lines in containerd's log (CRIU's restore log is quoted there)")
	}
	// The shim holds the stdin FIFO open: its name can go.
	if tio := task.IO(); tio != nil {
		_ = tio.Close()
	}
	return &Restored{ID: ctr.ID(), Namespace: r.o.Namespace, PID: task.Pid()}, nil
}

// taskErr reports a failed task: a mount the new spec lacks by its name
// (missingMount), anything else with remedy.
func (r *ctrdRestore) taskErr(what, id string, err error, remedy string) error {
	if m := missingMount(id, ociimage.CRIUDir(r.dir), err); m != nil {
		return m
	}
	return report.WithRemedy(fmt.Errorf("%s %s: %w", what, id, err), remedy)
}

func readJSONFile(p string, v any) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// needsHostNet refuses, before anything reaches containerd, the restore of
// a container that shared the host's network namespace when the user did
// not grant it again: the shim's confinement would refuse it later, with
// a remedy that cannot name this command's flag. The CRIU images say so,
// not the checkpoint's spec, which is the image's own word. Images that
// cannot be read are left to the shim, which refuses them with the reason.
func needsHostNet(dir string, o RestoreOptions) error {
	if o.NetHost {
		return nil
	}
	shared, err := confine.SharedWithHost(ociimage.CRIUDir(dir))
	if err != nil || !slices.Contains(shared, specs.NetworkNamespace) {
		return nil
	}
	return report.WithRemedy(fmt.Errorf("restore container %s: the checkpointed container shared the host's network namespace, and a restore takes no rights from the checkpoint: %w; nothing was restored", o.Name, ErrHostNetwork), "grant it again with --net-host")
}
