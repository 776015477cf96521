package runcwrap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/cryo-gpu/cryo/internal/criuaction/hooks"
)

// createValueFlags are the options of `runc create|run` that take a value.
var createValueFlags = map[string]bool{
	"bundle": true, "b": true, "console-socket": true, "pid-file": true, "preserve-fds": true,
}

// prepare, with CRYO_CRIU_HOOKS=1, points the bundle's CRIU configuration at
// cryo's action script before runc reads config.json (see internal/criuaction/hooks).
// A failure is logged and the container starts all the same: the hooks only
// guard checkpoints that bypass cryo-runc.
func (w *wrapper) prepare() {
	if !w.cfg.CRIUHooks {
		return
	}
	values := createValueFlags
	if w.cmd.command == "restore" {
		values = crValueFlags
	}
	bundle := flagValue(w.cmd.rest, "bundle", values)
	if b := flagValue(w.cmd.rest, "b", values); b != "" {
		bundle = b
	}
	id := lastPositional(w.cmd.rest, values)
	err := hooks.Prepare(absPath(bundle, "."), id, w.actionPath(), w.cfg.EnvFile)
	if errors.Is(err, hooks.ErrForeignCRIUConfig) {
		w.log.warn("container %s: %v", id, err)
	} else if err != nil {
		w.log.warn("container %s: CRIU action script not installed, direct runc checkpoints will not suspend CUDA: %v", id, err)
	}
}

// actionPath is cryo-criu-action: the configured one ($CRYO_CRIU_ACTION),
// else the name next to this cryo-runc (both are links to one binary).
func (w *wrapper) actionPath() string {
	if w.cfg.CRIUAction != "" {
		return w.cfg.CRIUAction
	}
	return filepath.Join(filepath.Dir(absPath(os.Args[0], os.Args[0])), "cryo-criu-action")
}

// lastPositional is the container id: the last argument that is neither an
// option nor an option's value.
func lastPositional(args []string, values map[string]bool) string {
	id := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			id = a
			continue
		}
		name, _, has := splitFlag(a)
		if values[name] && !has {
			i++
		}
	}
	return id
}
