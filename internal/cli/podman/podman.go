// Package podman holds the CLI's calls of Podman: the prechecks of a
// Podman restore, which ask Podman's store (only the CLI restores into
// it) before a checkpoint is unpacked, and the restore itself. The
// refusals are precheck.Errors, like every other precheck's.
package podman

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrNoBaseImage: the image a container checkpoint was created from is not
// in the container engine's store.
var ErrNoBaseImage = errors.New("base image missing")

// NameIn refuses a Podman restore under a name that a container
// already has in the store of the global options global (--root,
// --runroot…: a name is taken or free in one store only): `podman
// container restore --import` would fail after unpacking. name is the
// --name given, else the checkpointed container's. Without podman there is
// nothing to check: its restore says why.
func NameIn(ctx context.Context, global []string, name string) error {
	if name == "" {
		return nil
	}
	found, err := podmanExists(ctx, global, "container", name)
	if err != nil || !found {
		return err
	}
	return &precheck.Error{Err: precheck.ErrNameInUse, Detail: fmt.Sprintf("Podman already has a container named %s", name),
		Remedy: "restore under another name with --name NEW"}
}

// Image refuses a Podman restore whose base image ref is not in
// Podman's store: `podman container restore --import` needs it, and would
// say so only after the checkpoint was unpacked.
func Image(ctx context.Context, global []string, ref string) error {
	if _, err := exec.LookPath("podman"); ref == "" || err != nil {
		return nil
	}
	found, err := podmanExists(ctx, global, "image", ref)
	if err != nil || found {
		return err
	}
	return &precheck.Error{Err: ErrNoBaseImage, Detail: fmt.Sprintf("the checkpoint's base image %s is not in Podman's store", ref),
		Remedy: fmt.Sprintf("pull it first (podman %spull %s)", strings.Join(append(global, ""), " "), ref)}
}

// podmanExists runs `podman OBJECT exists NAME`, which exits 1 for "no
// such object". Without podman it reports nothing found and no error.
func podmanExists(ctx context.Context, global []string, object, name string) (bool, error) {
	path, err := exec.LookPath("podman")
	if err != nil {
		return false, nil
	}
	args := append(append(append([]string{}, global...), object, "exists"), name)
	var stderr strings.Builder
	c := exec.CommandContext(ctx, path, args...)
	c.Stderr = &stderr
	err = c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.ExitCode() == 1 && stderr.Len() == 0:
		// Podman exits 1 on its own errors too (a bad configuration),
		// but then says why.
		return false, nil
	default:
		return false, report.WithRemedy(fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String())),
			"check Podman's options (--root, --runroot, --runtime) and its configuration")
	}
}
