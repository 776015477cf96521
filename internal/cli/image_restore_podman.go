package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrPodmanRestore: `podman container restore --import` failed.
var ErrPodmanRestore = errors.New("podman restore failed")

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

// podmanRestoreArgs are the arguments of `podman container restore`.
func podmanRestoreArgs(cmd *cobra.Command, tarPath string) []string {
	args := append(podmanGlobal(cmd), "container", "restore", "--import", tarPath)
	if n := fString(cmd, "name"); n != "" {
		args = append(args, "--name", n)
	}
	if p := fString(cmd, "pod"); p != "" {
		args = append(args, "--pod", p)
	}
	ports, _ := cmd.Flags().GetStringArray("publish")
	for _, p := range ports {
		args = append(args, "--publish", p)
	}
	if fBool(cmd, "tcp-established") {
		args = append(args, "--tcp-established")
	}
	return args
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
	args := podmanRestoreArgs(cmd, tarPath)
	c := exec.CommandContext(ctx, "podman", args...)
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	err := c.Run()
	if err == nil {
		return nil
	}
	cleaned := removePodmanLeftover(context.WithoutCancel(ctx), cmd, name)
	return report.WithRemedy(fmt.Errorf("podman %s: %v (%w); %s", strings.Join(args, " "), err, ErrPodmanRestore, cleaned), "read Podman's message above")
}

// removePodmanLeftover removes the container a failed restore left
// behind: Podman creates it before the runtime restores, and keeps it
// Created when that fails, which holds the name against the next try.
// It says what it did, for the error message.
func removePodmanLeftover(ctx context.Context, cmd *cobra.Command, name string) string {
	if name == "" {
		return "no container name to clean up"
	}
	args := append(podmanGlobal(cmd), "container", "exists", name)
	if exec.CommandContext(ctx, "podman", args...).Run() != nil {
		return fmt.Sprintf("no container %s was left behind", name)
	}
	args = append(podmanGlobal(cmd), "rm", "-f", name)
	if out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput(); err != nil {
		return fmt.Sprintf("the container %s it left could not be removed (podman %s: %v: %s)", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return fmt.Sprintf("removed the container %s it had left (podman rm -f)", name)
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
