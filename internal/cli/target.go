package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
)

// ErrNoSuchPath is a path argument that names nothing.
var ErrNoSuchPath = errors.New("no such file or directory")

// PathError is a path argument cryo cannot use: missing or unreadable. Its
// message starts with the reason and ends with the path, so that a user
// sees at once which one, and never a registry's or a parser's complaint.
type PathError struct {
	Path string
	Err  error // ErrNoSuchPath or fs.ErrPermission
}

func (e *PathError) Error() string {
	if errors.Is(e.Err, fs.ErrPermission) {
		return fmt.Sprintf("permission denied: %s (run as root or fix its mode)", e.Path)
	}
	return fmt.Sprintf("no such file or directory: %s", e.Path)
}

func (e *PathError) Unwrap() error { return e.Err }

// resolveTarget sorts a target into a path (isPath) or a reference. A path
// must exist and be readable: its error is a *PathError.
func resolveTarget(target string) (isPath bool, err error) {
	if !ociimage.LooksLikePath(target) {
		return false, nil
	}
	return true, checkPath(target)
}

// refNotPath refuses a path given where an image of the store is wanted
// (restore --image, image restore): it would otherwise be looked up as a
// reference and fail with a registry's or a parser's words.
func refNotPath(cmd *cobra.Command, what, target string) error {
	isPath, err := resolveTarget(target)
	if err != nil || !isPath {
		return err
	}
	remedy := fmt.Sprintf("`cryo restore --dir %s` for a checkpoint directory, or `cryo image build %s REF` first", target, target)
	if isArchive(target) {
		remedy = fmt.Sprintf("`cryo restore --import %s` for a checkpoint archive, or `cryo image build %s REF` first", target, target)
	}
	return usageRemedy(cmd, fmt.Errorf("%s takes an image of the store, and %s is a path", what, target), remedy)
}

// checkPath opens path to find out whether cryo may read it: Stat alone
// succeeds on a file whose mode forbids reading.
func checkPath(path string) error {
	f, err := os.Open(path)
	switch {
	case err == nil:
		return f.Close()
	case errors.Is(err, fs.ErrNotExist):
		return &PathError{Path: path, Err: ErrNoSuchPath}
	case errors.Is(err, fs.ErrPermission):
		return &PathError{Path: path, Err: fs.ErrPermission}
	}
	return err
}

// notPermitted says whether err is a missing privilege: exit 77.
func notPermitted(err error) bool {
	var p *PathError
	return errors.Is(err, precheck.ErrNotRoot) || errors.As(err, &p) && errors.Is(p.Err, fs.ErrPermission)
}
