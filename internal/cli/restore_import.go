package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// importRef names a container checkpoint of an archive in the private
// store of its import.
const importRef = "localhost/cryo/import:latest"

// isArchive reports whether path is a file, not a directory: a checkpoint
// archive (`cryo image export`) rather than a checkpoint directory.
func isArchive(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// restoreDirArchive is `cryo restore --dir FILE`: the file is an archive,
// which --import restores; it says so, and does.
func (ap *app) restoreDirArchive(cmd *cobra.Command, file string) error {
	fmt.Fprintf(ap.messages(), "%s is a file, not a checkpoint directory: restoring it as `cryo restore --import %s`\n", file, file)
	return ap.restoreImport(cmd, file)
}

// restoreImport restores a checkpoint archive: it is unpacked, within the
// unpack bounds of an image restore, into a private 0700 work directory,
// checked as a directory is, and the work directory goes afterwards. A
// bare process tree is restored from the unpacked directory; a container's
// checkpoint is built into a private store there and restored as `cryo
// image restore` restores an image, into its engine.
func (ap *app) restoreImport(cmd *cobra.Command, file string) (err error) {
	if err := checkPath(file); err != nil {
		return err
	}
	if !isArchive(file) {
		return usageRemedy(cmd, fmt.Errorf("--import takes a checkpoint archive, and %s is a directory", file), fmt.Sprintf("`cryo restore --dir %s`", file))
	}
	base := ap.restoreBase()
	if err := os.MkdirAll(base, 0o700); err != nil {
		return report.WithRemedy(fmt.Errorf("import %s: %w", file, err), "check that "+base+" is writable")
	}
	work, err := os.MkdirTemp(base, "import-")
	if err != nil {
		return report.WithRemedy(fmt.Errorf("import %s: %w", file, err), "check that "+base+" is writable")
	}
	defer func() {
		if rerr := os.RemoveAll(work); rerr != nil {
			fmt.Fprintln(ap.messages(), report.Render(fmt.Sprintf("warning: could not remove %s, which holds the checkpoint's memory: %v", work, rerr), "remove it by hand"))
		}
	}()
	src, err := ociimage.OpenArchive(cmd.Context(), file, work, ociimage.LimitsFrom(ap.cfg))
	if err != nil {
		return err
	}
	defer src.Close()
	if src.Kind == ociimage.KindProcess {
		defer func() {
			if err != nil {
				_, err = orchestrate.KeepCRIULogs(err, src.CRIU, filepath.Join(base, "logs"))
			}
		}()
		return ap.restoreDir(cmd, src.CRIU)
	}
	return ap.restoreImportedContainer(cmd, src, filepath.Join(work, "store"))
}

// restoreImportedContainer builds a container's checkpoint into the
// private store at root, and restores it from there.
func (ap *app) restoreImportedContainer(cmd *cobra.Command, src *ociimage.Source, root string) error {
	if err := checkBuildSource(importRef, src); err != nil {
		return err
	}
	st, err := ociimage.OpenStore(cmd.Context(), root)
	if err != nil {
		return err
	}
	if _, _, err := ociimage.Build(cmd.Context(), st, src, ociimage.BuildOptions{Ref: importRef, Level: zstd.SpeedFastest, Progress: ap.renderer(cmd)}); err != nil {
		return err
	}
	if err := cmd.Flags().Set("store", root); err != nil {
		return err
	}
	return ap.restoreImage(cmd, importRef, "")
}

// given counts the non-empty values.
func given(v ...string) int {
	n := 0
	for _, s := range v {
		if s != "" {
			n++
		}
	}
	return n
}
