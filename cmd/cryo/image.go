package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/urfave/cli/v2"

	"github.com/cryo-gpu/cryo/config"
	"github.com/cryo-gpu/cryo/ctrd"
	"github.com/cryo-gpu/cryo/cudacr"
	"github.com/cryo-gpu/cryo/runtime"
	"github.com/cryo-gpu/cryo/snapshot/archive"
	filedigest "github.com/cryo-gpu/cryo/snapshot/digest"
	"github.com/cryo-gpu/cryo/snapshot/ociimage"
)

// imageCommand groups the registry-image commands; the work is in
// snapshot/ociimage.
func imageCommand() *cli.Command {
	return &cli.Command{
		Name:  "image",
		Usage: "build, push, pull and restore checkpoints as OCI images",
		Description: `A checkpoint image is a standard OCI image: its layers hold what a Podman
checkpoint export holds (checkpoint/ with the CRIU images and cryo's GPU
manifest, config.dump, spec.dump, rootfs-diff.tar), zstd-compressed, and its
manifest carries the checkpoint annotations of Podman, CRI-O and checkpointctl
plus cryo's GPU needs. Images live in a local OCI-layout store
($CRYO_IMAGE_STORE, default /var/lib/cryo/images for root), readable by the
owner only. See docs/images.md.`,
		Subcommands: []*cli.Command{
			imageBuildCommand(), imagePushCommand(), imagePullCommand(),
			imageUnpackCommand(), imageRestoreCommand(), imageListCommand(), imageRemoveCommand(),
		},
	}
}

var (
	addressFlag   = &cli.StringFlag{Name: "address", Value: "/run/containerd/containerd.sock", EnvVars: []string{"CONTAINERD_ADDRESS"}, Usage: "containerd's socket"}
	namespaceFlag = &cli.StringFlag{Name: "namespace", Value: "default", EnvVars: []string{"CONTAINERD_NAMESPACE"}, Usage: "containerd namespace"}
)

func containerdOptions(c *cli.Context) ctrd.Options {
	return ctrd.Options{Address: c.String("address"), Namespace: c.String("namespace")}
}

var storeFlag = &cli.StringFlag{Name: "store", DefaultText: "$" + config.EnvImageStore + ", else " + config.DefaultImageStore + " (root) or ~/.local/share/cryo/images", Usage: "local image store (an OCI image layout)"}

func remoteFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "plain-http", Usage: "talk HTTP to the registry (automatic for loopback addresses)"},
		&cli.BoolFlag{Name: "insecure", Usage: "HTTPS without certificate verification"},
		&cli.StringFlag{Name: "authfile", Usage: "auth file to try first (docker config.json or podman auth.json format)"},
		&cli.IntFlag{Name: "retries", Value: 3, Usage: "attempts of the whole transfer; blobs already moved are kept"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress on stderr"},
	}
}

func remoteOptions(c *cli.Context) ociimage.RemoteOptions {
	return ociimage.RemoteOptions{PlainHTTP: c.Bool("plain-http"), Insecure: c.Bool("insecure"), AuthFiles: append([]string{c.String("authfile")}, cfg.AuthFiles...)}
}

func transferOptions(c *cli.Context) ociimage.TransferOptions {
	o := ociimage.TransferOptions{RemoteOptions: remoteOptions(c), Attempts: c.Int("retries")}
	if !c.Bool("quiet") {
		o.Progress = os.Stderr
	}
	return o
}

func openStore(ctx context.Context, c *cli.Context) (*ociimage.Store, error) {
	st, err := ociimage.OpenStore(ctx, or(c.String("store"), cfg.ImageStore))
	if err != nil {
		return nil, err
	}
	st.Records = filedigest.RecordsFrom(cfg)
	return st, nil
}

func imageBuildCommand() *cli.Command {
	return &cli.Command{
		Name:      "build",
		Usage:     "turn a checkpoint into an OCI image in the local store",
		UsageText: "cryo image build [--encrypt --recipient PUB.pem] SOURCE REF\n   cryo image build --containerd [--address SOCK] [--namespace NS] CHECKPOINT REF",
		Description: `SOURCE is a "cryo checkpoint --dir" directory, a Podman/CRI-O export tar
("podman container checkpoint --export", plain, gzip or zstd) or its
extracted directory, or a containerd checkpoint exported with
"ctr image export" (tar or extracted directory).

With --containerd, CHECKPOINT is a checkpoint image in containerd's
namespace (the name "ctr task checkpoint" prints, or the REF of
"ctr container checkpoint --task [--rw]"). The image then carries the CRIU
images with cryo's GPU manifest, the container's spec, the rw layer and the
base image's name; restore it with "cryo image restore --containerd".

The checkpoint's files are verified against cryo's manifest first. Pages
files of at least --split bytes get a layer each.`,
		Flags: []cli.Flag{
			storeFlag,
			&cli.BoolFlag{Name: "containerd", Usage: "SOURCE is a checkpoint image in containerd (see --address, --namespace)"},
			addressFlag, namespaceFlag,
			&cli.Int64Flag{Name: "split", Value: ociimage.DefaultSplitAt, Usage: "pages files this big or bigger get their own layer (-1: one layer)"},
			&cli.StringFlag{Name: "level", Value: "default", Usage: "zstd level: fastest, default, better, best"},
			&cli.BoolFlag{Name: "encrypt", Usage: "encrypt the layers (ocicrypt JWE) for --recipient"},
			&cli.StringSliceFlag{Name: "recipient", Usage: "public key file (PEM) that may decrypt; repeatable; jwe: prefix accepted"},
			&cli.StringFlag{Name: "tmp", Value: os.TempDir(), Usage: "where an export tar is extracted while building"},
		},
		Action: imageBuildAction,
	}
}

func imageBuildAction(c *cli.Context) error {
	if c.NArg() != 2 {
		return fmt.Errorf("usage: %s", c.Command.UsageText)
	}
	ctx, stop := signalContext()
	defer stop()
	o, err := buildOptions(c)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	var src *ociimage.Source
	if c.Bool("containerd") {
		src, err = ctrd.Open(ctx, containerdOptions(c), c.Args().Get(0), c.String("tmp"))
	} else {
		src, err = ociimage.OpenSource(c.Args().Get(0), c.String("tmp"))
	}
	if err != nil {
		return err
	}
	defer src.Close()
	d, sum, err := ociimage.Build(ctx, st, src, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "built %s: %s in %d layers, %s raw (ratio %.1f)\n", o.Ref,
		ociimage.Human(sum.Sizes.Compressed), len(sum.Layers), ociimage.Human(sum.Sizes.Total), sum.Sizes.Ratio)
	fmt.Println(d.Digest)
	return nil
}

func buildOptions(c *cli.Context) (ociimage.BuildOptions, error) {
	o := ociimage.BuildOptions{Ref: c.Args().Get(1), SplitAt: c.Int64("split"),
		Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
	ok, level := zstd.EncoderLevelFromString(c.String("level"))
	if !ok {
		return o, fmt.Errorf("--level %q: want fastest, default, better or best", c.String("level"))
	}
	o.Level = level
	if c.Bool("encrypt") != (len(c.StringSlice("recipient")) > 0) {
		return o, fmt.Errorf("--encrypt needs at least one --recipient, and --recipient needs --encrypt")
	}
	if c.Bool("encrypt") {
		keys, err := ociimage.LoadKeys(c.StringSlice("recipient"))
		if err != nil {
			return o, err
		}
		o.Encrypt = &ociimage.EncryptOptions{PublicKeys: keys}
	}
	return o, nil
}

func imagePushCommand() *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "push an image of the local store to its registry",
		UsageText: "cryo image push [--plain-http] REF",
		Flags:     append([]cli.Flag{storeFlag}, remoteFlags()...),
		Action: func(c *cli.Context) error {
			return withRef(c, func(ctx context.Context, st *ociimage.Store, ref string) error {
				d, err := st.Push(ctx, ref, transferOptions(c))
				if err == nil {
					fmt.Println(d.Digest)
				}
				return err
			})
		},
	}
}

func imagePullCommand() *cli.Command {
	return &cli.Command{
		Name:      "pull",
		Usage:     "pull a checkpoint image into the local store, verifying every blob",
		UsageText: "cryo image pull [--plain-http] REF",
		Flags:     append([]cli.Flag{storeFlag}, remoteFlags()...),
		Action: func(c *cli.Context) error {
			return withRef(c, func(ctx context.Context, st *ociimage.Store, ref string) error {
				d, err := st.Pull(ctx, ref, transferOptions(c))
				if err == nil {
					fmt.Println(d.Digest)
				}
				return err
			})
		},
	}
}

func imageListCommand() *cli.Command {
	return &cli.Command{
		Name:  "ls",
		Usage: "list the images of the local store",
		Flags: []cli.Flag{storeFlag},
		Action: func(c *cli.Context) error {
			st, err := openStore(c.Context, c)
			if err != nil {
				return err
			}
			tags, err := st.List(c.Context)
			for _, t := range tags {
				fmt.Println(t)
			}
			return err
		},
	}
}

func imageRemoveCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "remove an image from the local store",
		UsageText: "cryo image rm REF",
		Flags:     []cli.Flag{storeFlag},
		Action: func(c *cli.Context) error {
			return withRef(c, func(ctx context.Context, st *ociimage.Store, ref string) error {
				return st.Remove(ctx, ref)
			})
		},
	}
}

// withRef runs fn with the one REF argument and the opened store.
func withRef(c *cli.Context, fn func(context.Context, *ociimage.Store, string) error) error {
	if c.NArg() != 1 {
		return fmt.Errorf("usage: %s", c.Command.UsageText)
	}
	ctx, stop := signalContext()
	defer stop()
	st, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	return fn(ctx, st, c.Args().First())
}

func keyFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "key", Usage: "private key file (PEM) to decrypt an encrypted image; repeatable"}
}

func decryptOptions(c *cli.Context) (*ociimage.DecryptOptions, error) {
	keys, err := ociimage.LoadKeys(c.StringSlice("key"))
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	return &ociimage.DecryptOptions{PrivateKeys: keys}, nil
}

func imageUnpackCommand() *cli.Command {
	return &cli.Command{
		Name:      "unpack",
		Usage:     "write an image's checkpoint into a new directory, verified",
		UsageText: "cryo image unpack [--key PRIV.pem] REF DIR",
		Description: `Every layer is checked against its digest and diff_id while it is extracted
(path traversal, escaping symlinks and devices are refused), then every CRIU
image file against cryo's manifest. On any failure DIR is removed. DIR then
holds the export layout: DIR/checkpoint is the CRIU image directory.`,
		Flags: []cli.Flag{storeFlag, keyFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return fmt.Errorf("usage: %s", c.Command.UsageText)
			}
			ctx, stop := signalContext()
			defer stop()
			_, err := unpack(ctx, c, c.Args().Get(0), c.Args().Get(1))
			return err
		},
	}
}

func unpack(ctx context.Context, c *cli.Context, ref, dir string) (*ociimage.Image, error) {
	dec, err := decryptOptions(c)
	if err != nil {
		return nil, err
	}
	st, err := openStore(ctx, c)
	if err != nil {
		return nil, err
	}
	if c.Bool("pull") {
		if _, err := st.Pull(ctx, ref, transferOptions(c)); err != nil {
			return nil, err
		}
	}
	return st.Unpack(ctx, ref, dir, dec)
}

func imageRestoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "restore a checkpoint image (pulled first with --pull)",
		UsageText: "cryo image restore [--pull] [--key PRIV.pem] [--dir WORK] REF\n   cryo image restore --containerd [--address SOCK] [--namespace NS] [--name NEW] [--log FILE] [--gpus LIST] [--pull] REF",
		Description: `Unpacks REF (verified, see "cryo image unpack") into WORK and restores it:
  - a bare-process checkpoint ("cryo checkpoint --dir") as "cryo restore --dir"
    does, printing the restored root's pid;
  - a Podman checkpoint with "podman container restore --import", so the
    container's runtime (cryo-runc for GPU containers) resumes CUDA;
  - a containerd checkpoint ("cryo image build --containerd") into the
    containerd at --address: the CRIU images and the rw layer go into its
    content store, container NEW is created from the base image (which must
    already be in the namespace: cryo does not pull it), the rw layer and the
    carried spec on the cryo runtime, and its task is restored and started;
    its stdout and stderr go to --log. It prints the container and the pid.
    --gpus gives it other GPUs than those it ran on, as a device plugin gives
    a restored pod other GPUs: the spec's GPU device nodes (/dev/nvidiaN) and
    their device-cgroup rules become those of the GPUs listed (indexes as
    nvidia-smi prints them, UUIDs, or device node paths), and the shim
    remaps the CUDA processes onto them. A GPU this host lacks is refused
    before anything reaches containerd.
The work directory holds the process's memory (decrypted): it is removed
after the restore, whether it succeeded, failed or was interrupted, unless
--dir was given. One left by a killed cryo is removed by the next restore.
--containerd refuses any other kind of checkpoint.`,
		Flags: append(append([]cli.Flag{storeFlag, keyFlag(),
			&cli.BoolFlag{Name: "pull", Usage: "pull REF from its registry first"},
			&cli.StringFlag{Name: "dir", Usage: "work directory for the unpacked checkpoint (default: a new one under /var/lib/cryo/restore)"},
			&cli.BoolFlag{Name: "shell-job", Usage: "bare process: restore into this terminal"},
			&cli.BoolFlag{Name: "tcp-established", Usage: "restore established TCP connections (automatic when the checkpoint holds some)"},
			copyTimeoutFlag,
		}, containerdRestoreFlags()...), remoteFlags()...),
		Action: imageRestoreAction,
	}
}

// containerdRestoreFlags are the flags of a restore into containerd, shared
// by "cryo image restore" and "cryo restore --image".
func containerdRestoreFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "containerd", Usage: "restore into containerd (automatic for containerd checkpoints)"},
		addressFlag, namespaceFlag,
		&cli.StringFlag{Name: "name", Usage: "name of the restored container (containerd, Podman); default: the checkpointed one's"},
		&cli.StringFlag{Name: "log", Usage: "containerd: file for the restored task's stdout and stderr (default: discarded)"},
		&cli.StringFlag{Name: "runtime", Usage: "containerd: runtime type (default: the checkpointed container's, else " + ctrd.CryoRuntime + ")"},
		&cli.StringFlag{Name: "snapshotter", Usage: "containerd: snapshotter (default: the checkpointed container's, else containerd's default)"},
		&cli.StringFlag{Name: "gpus", Usage: "containerd: give the restored container these GPUs instead of the recorded ones: indexes as nvidia-smi prints them (1 or 0,1), UUIDs, or device node paths (/dev/nvidia1); cryo remaps CUDA onto them", DefaultText: "the recorded GPUs"},
	}
}

func imageRestoreAction(c *cli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("usage: %s", c.Command.UsageText)
	}
	ctx, stop := signalContext()
	defer stop()
	return restoreImage(ctx, c, c.Args().First(), c.String("dir"))
}

// restoreImage pulls (with --pull), checks the kind, unpacks into dir
// (default: a new work directory) and restores by kind.
func restoreImage(ctx context.Context, c *cli.Context, ref, dir string) error {
	st, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	if c.Bool("pull") {
		if _, err := st.Pull(ctx, ref, transferOptions(c)); err != nil {
			return err
		}
	}
	im, err := st.LoadImage(ctx, ref)
	if err != nil {
		return err
	}
	if c.String("gpus") != "" && im.Kind() != ociimage.KindContainerd {
		return fmt.Errorf("%s is a %q checkpoint: --gpus gives other GPUs only to a container restored into containerd; remedy: restore it without --gpus (a bare process takes `cryo restore --gpu-map`; Podman gives the container the GPUs of its --device options): %w", ref, im.Kind(), ctrd.ErrNoGPU)
	}
	if c.Bool("containerd") && im.Kind() != ociimage.KindContainerd {
		return fmt.Errorf("%s is a %q checkpoint, not a containerd one; remedy: build it with `cryo image build --containerd`, or restore it without --containerd: %w", ref, im.Kind(), ociimage.ErrNotCheckpointImage)
	}
	dir, cleanup, err := workDir(dir)
	if err != nil {
		return err
	}
	defer cleanup()
	dec, err := decryptOptions(c)
	if err != nil {
		return err
	}
	if _, err := st.Unpack(ctx, ref, dir, dec); err != nil {
		return err
	}
	switch im.Kind() {
	case ociimage.KindProcess:
		return restoreProcess(ctx, c, dir)
	case ociimage.KindPodman:
		return restorePodman(ctx, c, dir)
	case ociimage.KindContainerd:
		return restoreContainerd(ctx, c, dir)
	case ociimage.KindKubelet:
		return fmt.Errorf("%s is a kubelet checkpoint (containerd's CRI CheckpointContainer): neither Podman nor `ctr` can restore it; remedy: restore it in a pod through containerd's CRI (docs/kubernetes.md), or unpack it with `cryo image unpack`: %w", ref, ociimage.ErrNotRestorable)
	}
	return fmt.Errorf("%s is a %q checkpoint, which cryo cannot restore; remedy: unpack it with `cryo image unpack` and restore it with the tool that took it (see docs/images.md)", ref, im.Kind())
}

func restoreContainerd(ctx context.Context, c *cli.Context, dir string) error {
	res, err := ctrd.Restore(ctx, dir, ctrd.RestoreOptions{
		Options: containerdOptions(c),
		Name:    c.String("name"), Runtime: c.String("runtime"), Snapshotter: c.String("snapshotter"),
		LogPath:   c.String("log"),
		Log:       func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
		GPUs:      splitGPUs(c.String("gpus")),
		Inventory: cudacr.New(runtime.DriverOptions(cfg)).Inventory,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "restored container %s in namespace %s\n", res.ID, res.Namespace)
	fmt.Println(res.PID)
	return nil
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

func restoreProcess(ctx context.Context, c *cli.Context, dir string) error {
	drv, err := driverOption(c)
	if err != nil {
		return err
	}
	res, err := orchestrator(drv).RestoreDetached(ctx, runtime.RestoreOptions{
		Dir: ociimage.CRIUDir(dir), ShellJob: c.Bool("shell-job"), TCPEstablished: c.Bool("tcp-established"),
	})
	printRestored(res)
	return err
}

// restorePodman hands the verified export to Podman as an uncompressed
// export tar: Podman then restores with the container's own runtime.
func restorePodman(ctx context.Context, c *cli.Context, dir string) error {
	tarPath := filepath.Join(dir, "export.tar")
	if err := tarDir(dir, tarPath); err != nil {
		return err
	}
	defer os.Remove(tarPath)
	args := []string{"container", "restore", "--import", tarPath}
	if n := c.String("name"); n != "" {
		args = append(args, "--name", n)
	}
	if c.Bool("tcp-established") {
		args = append(args, "--tcp-established")
	}
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("podman container restore --import %s: %w; remedy: read Podman's message above", tarPath, err)
	}
	return nil
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

// or is v, else def.
func or(v, def string) string {
	if v != "" {
		return v
	}
	return def
}
