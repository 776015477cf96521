package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/klauspost/compress/zstd"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/cli/ctrd"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/report"
)

// imageCommand groups the registry-image commands; the work is in
// internal/ociimage and ctrd.
func (ap *app) imageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "build, push, pull, export and restore checkpoints as OCI images",
		Long: `A checkpoint image is a standard OCI image: its layers hold what a Podman
checkpoint export holds (checkpoint/ with the CRIU images and cryo's GPU
manifest, config.dump, spec.dump, rootfs-diff.tar), zstd-compressed, and its
manifest carries the checkpoint annotations of Podman, CRI-O and checkpointctl
plus cryo's GPU needs. Images live in a local OCI-layout store
($CRYO_IMAGE_STORE, default /var/lib/cryo/images for root), readable by the
owner only. See docs/images.md.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return usageErrorf(cmd, "a subcommand is required") },
	}
	cmd.AddCommand(ap.imageBuildCommand(), ap.imagePushCommand(), ap.imagePullCommand(), ap.imageUnpackCommand(), ap.imageExportCommand(),
		ap.imageRestoreCommand(), ap.imageListCommand(), ap.imageRemoveCommand())
	return cmd
}

func containerdOptions(cmd *cobra.Command) ctrd.Options {
	return ctrd.Options{Address: fString(cmd, "address"), Namespace: fString(cmd, "namespace")}
}

func (ap *app) remoteOptions(cmd *cobra.Command) ociimage.RemoteOptions {
	return ociimage.RemoteOptions{
		PlainHTTP: fBool(cmd, "plain-http"),
		Insecure:  !fBool(cmd, "tls-verify") || fBool(cmd, "insecure"),
		AuthFiles: append([]string{fString(cmd, "authfile")}, ap.cfg.AuthFiles...),
	}
}

func (ap *app) transferOptions(cmd *cobra.Command) ociimage.TransferOptions {
	return ociimage.TransferOptions{RemoteOptions: ap.remoteOptions(cmd), Attempts: fInt(cmd, "retries"), Renderer: ap.renderer(cmd), Verify: ap.pullVerifier(cmd)}
}

// openStore opens an existing store: a command that only reads or removes
// must not leave an empty store behind a mistyped --store.
func (ap *app) openStore(ctx context.Context, cmd *cobra.Command) (*ociimage.Store, error) {
	root := ap.storeRoot(cmd)
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return nil, &StoreMissingError{Root: root}
	}
	return ap.createStore(ctx, cmd)
}

// createStore opens the store, creating it: for build and pull.
func (ap *app) createStore(ctx context.Context, cmd *cobra.Command) (*ociimage.Store, error) {
	st, err := ociimage.OpenStore(ctx, ap.storeRoot(cmd))
	if err != nil {
		return nil, err
	}
	st.Records = filedigest.RecordsFrom(ap.cfg)
	return st, nil
}

func (ap *app) storeRoot(cmd *cobra.Command) string {
	return cmp.Or(fString(cmd, "store"), ap.cfg.ImageStore)
}

// StoreMissingError is a store that does not exist, so holds no image.
type StoreMissingError struct{ Root string }

func (e *StoreMissingError) Error() string { return report.Render(e.Cause(), e.RemedyText()) }

// Cause is the message without the remedy (report.Remedied).
func (e *StoreMissingError) Cause() string { return "image store " + e.Root + " does not exist" }

// RemedyText is the remedy alone (report.Remedied).
func (e *StoreMissingError) RemedyText() string {
	return "give the --store that holds your images, or create it with `cryo image build` or `cryo image pull`"
}

func (ap *app) imageBuildCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "build SOURCE REF",
		Short: "turn a checkpoint into an OCI image in the local store",
		Long: `SOURCE is a "cryo checkpoint --dir" directory, a Podman/CRI-O export tar
("podman container checkpoint --export", plain, gzip or zstd) or its
extracted directory, a kubelet checkpoint archive (containerd's CRI
CheckpointContainer), or a containerd checkpoint exported with
"ctr image export" (tar or extracted directory).

With --containerd, SOURCE is a checkpoint image in containerd's
namespace (the name "ctr task checkpoint" prints, or the REF of
"ctr container checkpoint --task [--rw]"). The image then carries the CRIU
images with cryo's GPU manifest, the container's spec, the rw layer and the
base image's name; restore it with "cryo image restore".

The checkpoint's files are verified against cryo's manifest first. Pages
files of at least --split bytes get a layer each. The image's digest is
printed on stdout.

With --runnable the image is a container image first: the application's
image (the checkpoint's base image, or --base) plus one layer of the
container's changes, with the checkpoint in blobs that runtimes do not
unpack. A Kubernetes pod restores by naming it as its container image
(runtimeClassName: cryo): the kubelet pulls it with the pod's pull secrets,
and any other runtime starts the application fresh from it. The base image
is pulled from its registry (--authfile, --plain-http apply).`,
		Example: `  cryo image build /var/lib/ckpt/train localhost:5000/ckpt/train:v1
  cryo image build --containerd --namespace default train-ckpt:1 localhost:5000/ckpt/train:v1
  cryo image build --encryption-key jwe:pub.pem /tmp/export.tar.zst localhost:5000/ckpt/db:v1
  cryo image build --runnable /var/lib/kubelet/checkpoints/checkpoint-app.tar registry.example/ckpt/app:v1`,
		Args: exactArgs(2),
		RunE: ap.imageBuild,
	}
	fs := cmd.Flags()
	addStoreFlag(fs)
	fs.Bool("containerd", false, "SOURCE is a checkpoint image in containerd (see --address, --namespace)")
	ap.addContainerdFlags(fs)
	fs.Int64("split", ociimage.DefaultSplitAt, "pages files of `BYTES` or more get their own layer (-1: one layer)")
	fs.String("level", "default", "zstd `LEVEL`: fastest, default, better, best")
	fs.StringSlice("encryption-key", nil, "encrypt the layers (ocicrypt JWE) for this public key `FILE` (PEM, jwe: prefix accepted); repeatable")
	alias(fs, "recipient", "encryption-key")
	fs.Bool("encrypt", false, "")
	_ = fs.MarkDeprecated("encrypt", "--encryption-key alone encrypts")
	fs.String("tmp", "", "`DIR` where an export tar is extracted while building (default $TMPDIR, else /tmp)")
	fs.BoolP("quiet", "q", false, "no progress on stderr; only the digest on stdout")
	fs.Bool("runnable", false, "build a runnable checkpoint image: the application's image plus its changes, the checkpoint in blobs runtimes do not unpack (for Kubernetes)")
	fs.Bool("compress-pages", false, "with --runnable, compress the pages files too (fewer registry bytes; every restore then writes a copy of the memory instead of linking it)")
	fs.String("base", "", "with --runnable, the application's image `REF` to build on (default: the one the checkpoint names)")
	fs.Bool("tls-verify", true, "with --runnable, require HTTPS with a verified certificate from the base image's registry")
	fs.Bool("plain-http", false, "with --runnable, talk plain HTTP to the base image's registry (automatic for loopback addresses)")
	fs.Bool("insecure", false, "")
	_ = fs.MarkHidden("insecure")
	fs.String("authfile", "", "with --runnable, auth `FILE` for the base image's registry (then $REGISTRY_AUTH_FILE and the usual files)")
	addFormatFlags(cmd, "{{.ref}} {{.digest}}")
	return cmd
}

func (ap *app) imageBuild(cmd *cobra.Command, args []string) error {
	ctx := cmd.Context()
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	o, err := ap.buildOptions(cmd, args[1])
	if err != nil {
		return err
	}
	if err := ociimage.CheckRef(o.Ref); err != nil {
		return err
	}
	st, err := ap.createStore(ctx, cmd)
	if err != nil {
		return err
	}
	var src *ociimage.Source
	if fBool(cmd, "containerd") {
		src, err = ctrd.Open(ctx, containerdOptions(cmd), args[0], cmp.Or(fString(cmd, "tmp"), os.TempDir()))
	} else {
		src, err = ociimage.OpenSource(args[0], cmp.Or(fString(cmd, "tmp"), os.TempDir()))
	}
	if err != nil {
		return err
	}
	defer src.Close()
	if err := checkBuildSource(o.Ref, src); err != nil {
		return err
	}
	d, sum, err := ociimage.Build(ctx, st, src, o)
	if err != nil {
		return err
	}
	if !fBool(cmd, "quiet") {
		fmt.Fprintf(ap.messages(), "built %s: %s in %d layers, %s raw (ratio %.1f)\n", o.Ref,
			ociimage.Human(sum.Sizes.Compressed), len(sum.Layers), ociimage.Human(sum.Sizes.Total), sum.Sizes.Ratio)
	}
	if asJSON {
		return ap.printJSON(ap.stdout, imageResult{ImageInfo: st.Info(ctx, o.Ref), Layers: len(sum.Layers), Ratio: sum.Sizes.Ratio})
	}
	fmt.Fprintln(ap.stdout, d.Digest)
	return nil
}

func (ap *app) buildOptions(cmd *cobra.Command, ref string) (ociimage.BuildOptions, error) {
	o := ociimage.BuildOptions{Ref: ref, SplitAt: fInt64(cmd, "split"), Progress: ap.renderer(cmd),
		Runnable: fBool(cmd, "runnable"), Base: fString(cmd, "base"), Remote: ap.remoteOptions(cmd),
		CompressPages: fBool(cmd, "compress-pages")}
	if o.Base != "" && !o.Runnable {
		return o, usageErrorf(cmd, "--base needs --runnable")
	}
	if o.CompressPages && !o.Runnable {
		return o, usageErrorf(cmd, "--compress-pages needs --runnable: other images compress every layer")
	}
	ok, level := zstd.EncoderLevelFromString(fString(cmd, "level"))
	if !ok {
		return o, usageErrorf(cmd, "--level %q: want fastest, default, better or best", fString(cmd, "level"))
	}
	o.Level = level
	keys := fStrings(cmd, "encryption-key")
	if fBool(cmd, "encrypt") && len(keys) == 0 {
		return o, usageErrorf(cmd, "--encrypt needs --encryption-key PUB.pem")
	}
	if len(keys) > 0 {
		pub, err := ociimage.LoadKeys(keys)
		if err != nil {
			return o, err
		}
		o.Encrypt = &ociimage.EncryptOptions{PublicKeys: pub}
	}
	return o, nil
}

func (ap *app) imagePushCommand() *cobra.Command {
	return ap.transferCommand(&cobra.Command{
		Use:   "push REF",
		Short: "push an image of the local store to its registry",
		Long: `Pushes REF's blobs (skipping those the registry already has) and its manifest,
and prints the manifest digest on stdout. A failed blob is retried
(--retries); an interrupted push can be run again and moves only what is
missing.`,
		Example: "  cryo image push localhost:5000/ckpt/train:v1\n  cryo image push --authfile auth.json registry.example/ckpt/train:v1",
	}, (*ociimage.Store).Push)
}

func (ap *app) imagePullCommand() *cobra.Command {
	cmd := ap.transferCommand(&cobra.Command{
		Use:   "pull REF",
		Short: "pull a checkpoint image into the local store, verifying every blob",
		Long: `Pulls REF's manifest and blobs into the local store, checking every blob
against its digest, and prints the manifest digest on stdout. Blobs already
in the store are not fetched again.

Where a signature policy is in force (--policy, $CRYO_SIGNATURE_POLICY or
/etc/cryo/policy.json) or --signature-key is given, the manifest's digest
must carry a cosign signature by the signer its rule names before any layer
is fetched; the layers are then fetched by that digest, and the digest
verified is recorded on stderr (docs/images.md, "Verifying signatures").`,
		Example: "  cryo image pull localhost:5000/ckpt/train:v1\n  cryo image pull --signature-key cosign.pub registry.example/ckpt/train:v1",
	}, (*ociimage.Store).Pull)
	addTrustFlags(cmd.Flags())
	return cmd
}

// transferCommand completes push or pull: one REF, the registry flags, and
// the manifest digest on stdout once the transfer has succeeded.
func (ap *app) transferCommand(cmd *cobra.Command, move func(*ociimage.Store, context.Context, string, ociimage.TransferOptions) (ocispec.Descriptor, error)) *cobra.Command {
	cmd.Args = exactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		asJSON, err := ap.jsonOutput(cmd)
		if err != nil {
			return err
		}
		// A path is not a reference: said as such, never sent to a registry.
		if err := refNotPath(cmd, "REF", args[0]); err != nil {
			return err
		}
		// A pull may be the store's first image; a push needs one there.
		open := ap.openStore
		if cmd.Name() == "pull" {
			open = ap.createStore
		}
		st, err := open(cmd.Context(), cmd)
		if err != nil {
			return err
		}
		d, err := move(st, cmd.Context(), args[0], ap.transferOptions(cmd))
		switch {
		case err != nil:
			return err
		case asJSON:
			return ap.printJSON(ap.stdout, imageResult{ImageInfo: st.Info(cmd.Context(), args[0])})
		}
		fmt.Fprintln(ap.stdout, d.Digest)
		return nil
	}
	addStoreFlag(cmd.Flags())
	addRemoteFlags(cmd.Flags())
	addFormatFlags(cmd, "{{.ref}} {{.digest}}")
	return cmd
}

func (ap *app) imageRemoveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm REF...",
		Aliases: []string{"remove"},
		Short:   "remove images from the local store",
		Args:    minArgs(1),
		RunE:    ap.imageRemove,
	}
	addStoreFlag(cmd.Flags())
	cmd.Flags().BoolP("quiet", "q", false, "print nothing; the exit status says whether every REF was removed")
	addFormatFlags(cmd, "{{.ref}}")
	return cmd
}

// imageRemove removes each REF, printing each one removed on stdout, as
// "podman rmi" does, so that a script sees what went. With --json the
// document lists the removed ones even when a later REF fails.
func (ap *app) imageRemove(cmd *cobra.Command, args []string) error {
	asJSON, err := ap.jsonOutput(cmd)
	if err != nil {
		return err
	}
	removed := []removedImage{}
	err = ap.withStore(cmd, func(ctx context.Context, st *ociimage.Store) error {
		for _, ref := range args {
			d, _ := st.Resolve(ctx, ref)
			if err := st.Remove(ctx, ref); err != nil {
				return err
			}
			removed = append(removed, removedImage{Ref: ref, Digest: d.Digest.String()})
			if !fBool(cmd, "quiet") && !asJSON {
				fmt.Fprintf(ap.stdout, "removed %s\n", ref)
			}
		}
		return nil
	})
	if asJSON {
		if perr := ap.printJSON(ap.stdout, removed); perr != nil && err == nil {
			return perr
		}
	}
	return err
}

// withStore runs fn with the opened store.
func (ap *app) withStore(cmd *cobra.Command, fn func(context.Context, *ociimage.Store) error) error {
	st, err := ap.openStore(cmd.Context(), cmd)
	if err != nil {
		return err
	}
	return fn(cmd.Context(), st)
}

func decryptOptions(cmd *cobra.Command) (*ociimage.DecryptOptions, error) {
	keys, err := ociimage.LoadKeys(fStrings(cmd, "decryption-key"))
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	return &ociimage.DecryptOptions{PrivateKeys: keys}, nil
}

func (ap *app) imageUnpackCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "unpack REF DIR",
		Short: "write an image's checkpoint into a new directory, verified",
		Long: `Every layer is checked against its digest and diff_id while it is extracted
(path traversal, escaping symlinks and devices are refused), then every CRIU
image file against cryo's manifest. On any failure DIR is removed. DIR then
holds the export layout: DIR/checkpoint is the CRIU image directory.`,
		Example: "  cryo image unpack localhost:5000/ckpt/train:v1 /tmp/train",
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dec, err := decryptOptions(cmd)
			if err != nil {
				return err
			}
			return ap.withStore(cmd, func(ctx context.Context, st *ociimage.Store) error {
				if fBool(cmd, "pull") {
					if _, err := st.Pull(ctx, args[0], ap.transferOptions(cmd)); err != nil {
						return err
					}
				}
				_, err := st.UnpackWith(ctx, args[0], args[1], ociimage.UnpackOptions{Decrypt: dec, Progress: ap.renderer(cmd), Limits: ociimage.LimitsFrom(ap.cfg)})
				return err
			})
		},
	}
	fs := cmd.Flags()
	addStoreFlag(fs)
	addDecryptFlags(fs)
	fs.Bool("pull", false, "pull REF from its registry first")
	addRemoteFlags(fs)
	addTrustFlags(fs)
	return cmd
}

// addContainerdRestoreFlags are the flags of a restore into containerd,
// shared by "cryo image restore" and "cryo restore --image".
func (ap *app) addContainerdRestoreFlags(fs *pflag.FlagSet) {
	fs.Bool("containerd", false, "restore into containerd (automatic for containerd checkpoints)")
	ap.addContainerdFlags(fs)
	fs.String("name", "", "`NAME` of the restored container (containerd, Podman); default: the checkpointed one's")
	fs.String("log", "", "containerd: `FILE` for the restored task's stdout and stderr (default: discarded)")
	fs.String("runtime", "", "containerd: runtime `TYPE` (default: "+ctrd.CryoRuntime+"; the checkpoint's is never used)")
	fs.String("snapshotter", "", "containerd: `SNAPSHOTTER` (default: containerd's; the checkpoint's is never used)")
	fs.Bool("net-host", false, "containerd: the restored container shares the host's network namespace (as ctr run --net-host does), which a checkpoint of a container that shared it needs; never taken from the checkpoint")
	fs.StringArray("mount", nil, "containerd: give the restored container the mount `SPEC` (type=bind,src=HOST-DIR,dst=PATH[,options=rbind:ro]; repeatable); the checkpoint's mounts are never carried")
	fs.String("gpus", "", "containerd: give the restored container the GPUs of `LIST` instead of the recorded ones: indexes as nvidia-smi prints them (1 or 0,1), UUIDs, or device node paths (/dev/nvidia1); cryo remaps CUDA onto them")
}
