package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/cli/ctrd"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

func (ap *app) imageRestoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore REF",
		Short: "restore a checkpoint image (pulled first with --pull)",
		Long: `Unpacks REF (verified, see "cryo image unpack") into a work directory and
restores it by its kind:
  - a bare-process checkpoint ("cryo checkpoint --dir") as "cryo restore --dir"
    does, onto the GPUs of --gpu-map if given, printing the restored root's
    pid;
  - a Podman checkpoint with "podman container restore --import", so the
    container's runtime (cryo-runc for GPU containers) resumes CUDA.
    Podman's --root, --runroot, --runtime and --runtime-flag go to every
    podman call, --pod, --publish and --name to the restore; a container
    that a failed restore left Created is removed (podman rm -f);
  - a containerd checkpoint ("cryo image build --containerd") into the
    containerd at --address: the rw layer goes into its content store
    while the CRIU images stay in the verified work directory, which the
    task names (runc's CriuImagePath); container --name (default: the
    checkpointed container's) is created from the base image (which must
    already be in the namespace: cryo does not pull it) and the rw layer, on --runtime (default the cryo runtime),
    and its task is restored and started; its stdout and stderr go to
    --log. It prints the container and the pid. The container's spec is
    made as "ctr run" makes one, from the base image and the flags alone:
    the spec in the image is never used (no hooks, mounts, devices,
    capabilities, namespaces or runtime of its choosing), only its
    terminal flag; --mount adds a mount. --gpus gives it other GPUs than
    those it ran on, as a device plugin gives a restored pod other GPUs;
    without it, it gets this host's nodes of the GPUs it ran on. The shim
    remaps the CUDA processes onto them. A GPU this host lacks is refused
    before anything reaches containerd.

Before anything is unpacked, what the image's manifest can answer is
checked: the container name is free, the base image is there, --gpus
names GPUs of this host, a bare tree's pids are free, and this host has
the GPUs and driver its annotations ask for. All of it is checked again
from the verified checkpoint.

A kubelet checkpoint is restored in a pod (docs/kubernetes.md), not here.

The work directory holds the process's memory (decrypted): it is removed
after the restore, whether it succeeded, failed or was interrupted, unless
--dir was given. One left by a killed cryo is removed by the next restore.
So is, into containerd, the container (and its lease) of a restore whose
cryo was killed before the container's task started: the same command,
run again, restores.`,
		Example: `  cryo image restore --pull localhost:5000/ckpt/train:v1
  cryo image restore --name train-2 --gpus 1 --log /tmp/train.log localhost:5000/ckpt/train:v1
  cryo image restore --decryption-key priv.pem localhost:5000/ckpt/db:v1`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refNotPath(cmd, "REF", args[0]); err != nil {
				return err
			}
			return ap.restoreImage(cmd, args[0], fString(cmd, "dir"))
		},
	}
	fs := cmd.Flags()
	fs.String("dir", "", "work directory `DIR` for the unpacked checkpoint, kept afterwards (default: a new one under /var/lib/cryo/restore, removed)")
	ap.addImageRestoreFlags(fs, restoreHelp{
		pull:       "pull REF from its registry first",
		shellJob:   "bare process: restore into this terminal",
		printStats: "bare process: print the time of each step and CRIU's statistics on stdout, after the pid",
	})
	addFormatFlags(cmd, "{{.pid}}")
	return cmd
}

// restoreHelp is the help of the image restore flags whose words depend
// on the command: `restore` takes a directory too, `image restore` only
// an image, whose kind decides what the flag does.
type restoreHelp struct{ pull, shellJob, printStats string }

// addImageRestoreFlags adds the flags of a restore from a checkpoint
// image, which `restore --image` and `image restore` share: one set, so
// that a flag added for one is there for the other (restoreImage reads
// them all from either command).
func (ap *app) addImageRestoreFlags(fs *pflag.FlagSet, h restoreHelp) {
	fs.Bool("pull", false, h.pull)
	fs.Bool("shell-job", false, h.shellJob)
	fs.Bool("tcp-established", false, "restore established TCP connections (automatic when the checkpoint holds some)")
	fs.Bool("print-stats", false, h.printStats)
	ap.addGPUMapFlag(fs)
	ap.addCopyTimeout(fs)
	addStoreFlag(fs)
	addDecryptFlags(fs)
	ap.addContainerdRestoreFlags(fs)
	addPodmanRestoreFlags(fs)
	addRemoteFlags(fs)
	addTrustFlags(fs)
}

// restoreImage fetches REF (pulled first with --pull, checked cheaply
// before any layer moves), unpacks it verified into dir (default: a new
// work directory) and restores it by kind.
func (ap *app) restoreImage(cmd *cobra.Command, ref, dir string) (err error) {
	ctx, cancel := ap.withRestoreDeadline(cmd)
	defer cancel()
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	dec, err := decryptOptions(cmd)
	if err != nil {
		return err
	}
	f, err := imagerestore.Fetch(ctx, ap.fetchOptions(cmd, ref))
	if err != nil {
		return cutOff(ctx, ref, "fetch", err)
	}
	mounts, err := mountFlags(cmd)
	if err != nil {
		return err
	}
	if dir != "" {
		ap.keptWorkDir(dir) // said first: the restore's last line on stdout is the pid
	}
	work, err := f.Unpack(ctx, imagerestore.UnpackOptions{Dir: dir, Base: ap.restoreBase(), Decrypt: dec, Progress: ap.renderer(cmd), Limits: ociimage.LimitsFrom(ap.cfg)})
	if orchestrate.PastDeadline(ctx, err) || errors.Is(err, ociimage.ErrUnpackLimit) {
		return cutOff(ctx, ref, "unpack", err)
	}
	if err != nil {
		return unpackError(err)
	}
	defer func() {
		// The work directory goes; CRIU's log, the evidence of a failed
		// restore, stays where the message says.
		if err != nil {
			_, err = orchestrate.KeepCRIULogs(err, work.Dir, filepath.Join(ap.restoreBase(), "logs"))
		}
		ap.removeWorkDir(work)
	}()
	return ap.restoreKind(ctx, cmd, asJSON, f.Image, work.Dir, mounts)
}

// fetchOptions are the flags' FetchOptions: the store as the other image
// commands open it (created only for a pull, which may be its first
// image), and no pin: the user names what they restore, a pull is judged
// by the signature policy of the flags (--policy, --signature-key).
func (ap *app) fetchOptions(cmd *cobra.Command, ref string) imagerestore.FetchOptions {
	o := imagerestore.FetchOptions{
		Ref: ref, Pull: imagerestore.PullNever, Transfer: ap.transferOptions(cmd),
		Check: func(ctx context.Context, im *ociimage.Image) error { return ap.checkImageCheaply(ctx, cmd, im) },
		Open:  func(ctx context.Context) (*ociimage.Store, error) { return ap.openStore(ctx, cmd) },
	}
	if fBool(cmd, "pull") {
		o.Pull = imagerestore.PullAlways
		o.Open = func(ctx context.Context) (*ociimage.Store, error) { return ap.createStore(ctx, cmd) }
	}
	return o
}

// restoreKind restores the checkpoint unpacked in dir by its image's kind.
func (ap *app) restoreKind(ctx context.Context, cmd *cobra.Command, asJSON bool, im *ociimage.Image, dir string, mounts []specs.Mount) error {
	switch im.Kind() {
	case ociimage.KindProcess:
		return ap.restoreDir(cmd, ociimage.CRIUDir(dir))
	case ociimage.KindPodman:
		return restorePodman(ctx, cmd, dir, cmp.Or(fString(cmd, "name"), ociimage.FromManifest(im.Manifest).Name))
	case ociimage.KindContainerd:
		return ap.restoreContainerd(ctx, cmd, asJSON, dir, mounts)
	}
	return report.WithRemedy(fmt.Errorf("%s is a %q checkpoint, which cryo cannot restore", im.Ref, im.Kind()), "unpack it with `cryo image unpack` and restore it with the tool that took it (see docs/images.md)")
}

// checkImageCheaply runs the checks that need no layer: the flags against
// the image's kind, then the name, base image, pids and GPUs it records.
func (ap *app) checkImageCheaply(ctx context.Context, cmd *cobra.Command, im *ociimage.Image) error {
	if err := flagsFitKind(cmd, im.Ref, im.Kind()); err != nil {
		return err
	}
	return ap.precheckImage(ctx, cmd, im)
}

// flagsFitKind refuses, before anything is unpacked, flags that the image's
// kind cannot honour: silently ignoring --gpus or --gpu-map would restore
// onto GPUs the user did not ask for.
func flagsFitKind(cmd *cobra.Command, ref string, kind ociimage.Kind) error {
	set := func(name string) bool { return cmd.Flags().Changed(name) }
	switch {
	case kind == ociimage.KindKubelet:
		return report.WithRemedy(fmt.Errorf("%s is a kubelet checkpoint (containerd's CRI CheckpointContainer): neither Podman nor `ctr` can restore it: %w", ref, ociimage.ErrNotRestorable), "restore it in a pod through containerd's CRI (docs/kubernetes.md)")
	case set("gpus") && kind != ociimage.KindContainerd:
		return report.WithRemedy(fmt.Errorf("%s is a %q checkpoint: --gpus gives other GPUs only to a container restored into containerd: %w", ref, kind, ctrd.ErrNoGPU), otherGPUsRemedy(kind))
	case set("net-host") && kind != ociimage.KindContainerd:
		return report.WithRemedy(fmt.Errorf("%s is a %q checkpoint: --net-host is for a container restored into containerd: %w", ref, kind, ctrd.ErrMount), "restore without --net-host")
	case set("mount") && kind != ociimage.KindContainerd:
		return report.WithRemedy(fmt.Errorf("%s is a %q checkpoint: --mount adds mounts only to a container restored into containerd: %w", ref, kind, ctrd.ErrMount), "restore without --mount")
	case set("gpu-map") && kind != ociimage.KindProcess:
		return report.WithRemedy(fmt.Errorf("%s is a %q checkpoint: --gpu-map remaps only a bare process: %w", ref, kind, ctrd.ErrNoGPU), otherGPUsRemedy(kind))
	case kind != ociimage.KindPodman && anySet(cmd, podmanOnlyFlags):
		return report.WithRemedy(fmt.Errorf("%s is a %q checkpoint: --%s is one of Podman's options, for a Podman checkpoint only: %w", ref, kind, firstSet(cmd, podmanOnlyFlags), ociimage.ErrNotCheckpointImage), "restore without it")
	case fBool(cmd, "containerd") && kind != ociimage.KindContainerd:
		return report.WithRemedy(fmt.Errorf("%s is a %q checkpoint, not a containerd one: %w", ref, kind, ociimage.ErrNotCheckpointImage), "build it with `cryo image build --containerd`, or restore it without --containerd")
	}
	return nil
}

// otherGPUsRemedy says how each kind is given other GPUs.
func otherGPUsRemedy(kind ociimage.Kind) string {
	switch kind {
	case ociimage.KindProcess:
		return "use --gpu-map OLD-UUID=NEW-UUID"
	case ociimage.KindContainerd:
		return "use --gpus"
	case ociimage.KindPodman:
		return "Podman gives the restored container the GPUs of its --device options; restore without --gpus/--gpu-map"
	}
	return "restore without --gpus/--gpu-map"
}

func (ap *app) restoreContainerd(ctx context.Context, cmd *cobra.Command, asJSON bool, dir string, mounts []specs.Mount) error {
	res, err := ctrd.Restore(ctx, dir, ctrd.RestoreOptions{
		Options: containerdOptions(cmd),
		Name:    fString(cmd, "name"), Runtime: fString(cmd, "runtime"), Snapshotter: fString(cmd, "snapshotter"),
		LogPath:   fString(cmd, "log"),
		Log:       restoreLog(ap.messages(), fBool(cmd, "quiet")),
		GPUs:      splitGPUs(fString(cmd, "gpus")),
		Inventory: cuda.New(ap.runtimeDriverOptions()).Inventory,
		Mounts:    mounts,
		NetHost:   fBool(cmd, "net-host"),
		Limits:    ociimage.LimitsFrom(ap.cfg),
	})
	if err != nil {
		return interruptedCtrd(err)
	}
	if asJSON {
		return ap.printJSON(ap.stdout, restoreResult{PID: int(res.PID), Container: res.ID, Namespace: res.Namespace})
	}
	if !fBool(cmd, "quiet") {
		fmt.Fprintf(ap.messages(), "restored container %s in namespace %s\n", res.ID, res.Namespace)
	}
	fmt.Fprintln(ap.stdout, res.PID)
	return nil
}

// mountFlags reads each --mount.
func mountFlags(cmd *cobra.Command) ([]specs.Mount, error) {
	vals, err := cmd.Flags().GetStringArray("mount")
	if err != nil {
		return nil, err
	}
	var out []specs.Mount
	for _, v := range vals {
		m, err := ctrd.ParseMount(v)
		if err != nil {
			return nil, usageErrorf(cmd, "%w", err)
		}
		out = append(out, m)
	}
	return out, nil
}

// splitGPUs splits --gpus at its commas.
func splitGPUs(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func tarDir(dir, tarPath string) error {
	files, err := ociimage.Files(dir)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(tarPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, archive.FileMode)
	if err != nil {
		return err
	}
	if err := archive.Write(f, files); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tarPath, err)
	}
	return f.Close()
}

func (ap *app) runtimeDriverOptions() cuda.Options { return orchestrate.DriverOptions(ap.cfg) }

// restoreLog prints the containerd restore's lines on w; quiet keeps only
// its warnings (a base image that changed), which need the user, and drops
// the steps it narrates.
func restoreLog(w io.Writer, quiet bool) func(string, ...any) {
	return func(f string, a ...any) {
		if quiet && !strings.HasPrefix(f, "warning:") {
			return
		}
		fmt.Fprintf(w, f+"\n", a...)
	}
}

// interruptedCtrd words a restore into containerd that an interrupt
// stopped before its task started: nothing was restored, and the
// checkpoint, which a restore only reads, is whole (withRetry gives the
// command to run again). What is left in containerd is what the restore
// read back after its undo (in.Left), also when the interrupt landed in
// the middle of a call that containerd finished after cryo stopped
// waiting.
func interruptedCtrd(err error) error {
	var in *ctrd.Interrupted
	if !errors.As(err, &in) {
		return err
	}
	outcome := "nothing was restored, and nothing of it is left in containerd"
	if in.Left != nil {
		outcome = fmt.Sprintf("nothing was restored, but not all of it could be removed from containerd: %v", in.Left)
	}
	return &report.StepError{Op: "restore", ID: "container " + in.Name, Step: in.Step, Outcome: outcome,
		Err: fmt.Errorf("%w: %w", orchestrate.ErrRestoreInterrupted, in.Err)}
}
