package precheck

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
)

// PodmanName refuses a Podman restore under a name that a container
// already has: `podman container restore --import` would fail after
// unpacking. name is the --name given, else the checkpointed container's.
// Without podman there is nothing to check: its restore says why.
func PodmanName(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	path, err := exec.LookPath("podman")
	if err != nil {
		return nil
	}
	err = exec.CommandContext(ctx, path, "container", "exists", name).Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return &Error{Err: ErrNameInUse, Detail: fmt.Sprintf("Podman already has a container named %s", name),
			Remedy: "restore under another name with --name NEW"}
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return nil // podman container exists: 1 is "no such container"
	default:
		return fmt.Errorf("podman container exists %s: %w", name, err)
	}
}
