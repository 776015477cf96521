package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
	"github.com/cryo-gpu/cryo/internal/report"
)

func (ap *app) imageExportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export SOURCE FILE.tar",
		Short: "write a checkpoint as an export archive that checkpointctl and Podman read",
		Long: `Writes SOURCE as an uncompressed tar in Podman's export layout: checkpoint/
(the CRIU images with cryo's manifest), config.dump, spec.dump, stats-dump
and, for containers, rootfs-diff.tar. "checkpointctl inspect|show" reads it
for every kind (process, Podman, containerd, kubelet) with the right name,
creation time and sizes, "cryo restore --import FILE.tar" restores it (bare
processes and containers), and "podman container restore --import" restores
the Podman kind. A bare process gets a config.dump and spec.dump written
from what cryo recorded.

SOURCE is an image of the local store (every layer is checked against its
digest and diff_id, and decrypted with --decryption-key, as it streams:
nothing is unpacked on disk), or a "cryo checkpoint --dir" directory.
FILE.tar must not exist; "-" writes to stdout. On any failure the partial
file is removed.`,
		Example: `  cryo image export localhost:5000/ckpt/train:v1 /tmp/train.tar && checkpointctl inspect /tmp/train.tar
  cryo image export /var/lib/ckpt/train - | zstd > train.tar.zst`,
		Args: exactArgs(2),
		RunE: ap.imageExport,
	}
	fs := cmd.Flags()
	addStoreFlag(fs)
	addDecryptFlags(fs)
	return cmd
}

func (ap *app) imageExport(cmd *cobra.Command, args []string) error {
	src, dst := args[0], args[1]
	// A path source that is missing or unreadable says so before a file
	// is created for it.
	if _, err := resolveTarget(src); err != nil {
		return err
	}
	write := func(w io.Writer) error { return ap.exportTo(cmd, src, w) }
	if dst == "-" {
		return write(ap.stdout)
	}
	// The archive holds process memory: owner-only, and never over a file.
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, archive.FileMode)
	if errors.Is(err, os.ErrExist) {
		return report.WithRemedy(fmt.Errorf("export %s: %s already exists: %w", src, dst, err), "name a new file or remove it first")
	}
	if err != nil {
		return report.WithRemedy(fmt.Errorf("export %s: %w", src, err), "name a file in a directory you can write")
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return err
	}
	fmt.Fprintf(ap.messages(), "exported %s to %s\n", src, dst)
	return nil
}

// exportTo streams a directory or a store image to w.
func (ap *app) exportTo(cmd *cobra.Command, src string, w io.Writer) error {
	if fi, err := os.Stat(src); err == nil && fi.IsDir() {
		s, err := ociimage.OpenSource(src, os.TempDir())
		if err != nil {
			return err
		}
		defer s.Close()
		return ociimage.ExportSource(s, w)
	}
	dec, err := decryptOptions(cmd)
	if err != nil {
		return err
	}
	return ap.withStore(cmd, func(ctx context.Context, st *ociimage.Store) error {
		return st.Export(ctx, src, w, dec)
	})
}
