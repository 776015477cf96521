package podman

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/cryo-gpu/cryo/internal/report"
)

// ErrRestore: `podman container restore --import` failed.
var ErrRestore = errors.New("podman restore failed")

// Restore is one `podman container restore --import` of the CLI: Podman's
// global options (its store and runtime: every podman call of the restore
// sees the same) and the restore's own.
type Restore struct {
	Global         []string // --root, --runroot, --runtime, --runtime-flag
	Name           string   // --name
	Pod            string   // --pod
	Publish        []string // --publish, each
	TCPEstablished bool
}

// Args are the arguments of `podman container restore` of tarPath.
func (r Restore) Args(tarPath string) []string {
	args := append(append([]string(nil), r.Global...), "container", "restore", "--import", tarPath)
	if r.Name != "" {
		args = append(args, "--name", r.Name)
	}
	if r.Pod != "" {
		args = append(args, "--pod", r.Pod)
	}
	for _, p := range r.Publish {
		args = append(args, "--publish", p)
	}
	if r.TCPEstablished {
		args = append(args, "--tcp-established")
	}
	return args
}

// Run restores the export tar tarPath, Podman's output going to stdout
// and stderr. name is the container's name (--name, else the
// checkpointed one's), which a failed restore may leave Created: Run
// removes it then, and its error says what it did.
func (r Restore) Run(ctx context.Context, tarPath, name string, stdout, stderr io.Writer) error {
	args := r.Args(tarPath)
	c := exec.CommandContext(ctx, "podman", args...)
	c.Stdout, c.Stderr = stdout, stderr
	err := c.Run()
	if err == nil {
		return nil
	}
	cleaned := RemoveLeftover(context.WithoutCancel(ctx), r.Global, name)
	return report.WithRemedy(fmt.Errorf("podman %s: %v (%w); %s", strings.Join(args, " "), err, ErrRestore, cleaned), "read Podman's message above")
}

// RemoveLeftover removes the container a failed restore left behind:
// Podman creates it before the runtime restores, and keeps it Created
// when that fails, which holds the name against the next try. It says
// what it did, for the error message.
func RemoveLeftover(ctx context.Context, global []string, name string) string {
	if name == "" {
		return "no container name to clean up"
	}
	args := append(append([]string(nil), global...), "container", "exists", name)
	if exec.CommandContext(ctx, "podman", args...).Run() != nil {
		return fmt.Sprintf("no container %s was left behind", name)
	}
	args = append(append([]string(nil), global...), "rm", "-f", name)
	if out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput(); err != nil {
		return fmt.Sprintf("the container %s it left could not be removed (podman %s: %v: %s)", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return fmt.Sprintf("removed the container %s it had left (podman rm -f)", name)
}
