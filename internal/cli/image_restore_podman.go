package cli

import (
	"context"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/cli/podman"
)

// addPodmanRestoreFlags adds the options of Podman that a restore of a
// Podman checkpoint passes on: the store and runtime (Podman's global
// options) and the restore's own. --name and --runtime are shared with
// the containerd restore.
func addPodmanRestoreFlags(fs *pflag.FlagSet) {
	fs.String("root", "", "Podman: its --root `DIR` (the storage of the Podman to restore into)")
	fs.String("runroot", "", "Podman: its --runroot `DIR`")
	fs.StringArray("runtime-flag", nil, "Podman: pass `FLAG` to its OCI runtime (podman --runtime-flag; repeatable)")
	fs.String("pod", "", "Podman: restore into the existing pod `POD`")
	fs.StringArray("publish", nil, "Podman: publish `PORT` (podman container restore --publish; repeatable)")
}

// podmanOnlyFlags are the flags only a Podman restore honours.
var podmanOnlyFlags = []string{"root", "runroot", "runtime-flag", "pod", "publish"}

// podmanGlobal are Podman's global options from the flags: every podman
// call of the restore (its checks, the restore, the cleanup) sees the same
// store and runtime.
func podmanGlobal(cmd *cobra.Command) []string {
	var out []string
	for _, f := range []string{"root", "runroot", "runtime"} {
		if v := fString(cmd, f); v != "" {
			out = append(out, "--"+f, v)
		}
	}
	flags, _ := cmd.Flags().GetStringArray("runtime-flag")
	for _, v := range flags {
		out = append(out, "--runtime-flag", v)
	}
	return out
}

// podmanRestore is the Podman restore the flags ask for.
func podmanRestore(cmd *cobra.Command) podman.Restore {
	ports, _ := cmd.Flags().GetStringArray("publish")
	return podman.Restore{Global: podmanGlobal(cmd), Name: fString(cmd, "name"), Pod: fString(cmd, "pod"),
		Publish: ports, TCPEstablished: fBool(cmd, "tcp-established")}
}

// restorePodman hands the verified export to Podman as an uncompressed
// export tar: Podman then restores with the container's own runtime (or
// --runtime). name is the container's name (--name, else the
// checkpointed one's), which a failed restore may leave Created.
func restorePodman(ctx context.Context, cmd *cobra.Command, dir, name string) error {
	tarPath := filepath.Join(dir, "export.tar")
	if err := tarDir(dir, tarPath); err != nil {
		return err
	}
	defer os.Remove(tarPath)
	return podmanRestore(cmd).Run(ctx, tarPath, name, os.Stdout, os.Stderr)
}

// anySet reports whether any of the flags was given.
func anySet(cmd *cobra.Command, names []string) bool { return firstSet(cmd, names) != "" }

// firstSet is the first of the flags that was given, or "".
func firstSet(cmd *cobra.Command, names []string) string {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return n
		}
	}
	return ""
}
