// Command cryo is one multi-call binary, to keep the bundle small: called as
// containerd-shim-cryo-v2 it is the containerd shim, as cryo-runc the
// runc-compatible runtime, as cryo-criu-action CRIU's action script, and as
// cryo the user CLI.
package main

import (
	"os"
	"path/filepath"

	"github.com/cryo-gpu/cryo/internal/cli"
	"github.com/cryo-gpu/cryo/internal/criuaction"
	"github.com/cryo-gpu/cryo/internal/runcwrap"
	"github.com/cryo-gpu/cryo/internal/shim"
)

func main() {
	switch filepath.Base(os.Args[0]) {
	case "containerd-shim-cryo-v2":
		shim.Main()
	case "cryo-runc":
		os.Exit(runcwrap.Main(os.Args[1:]))
	case "cryo-criu-action":
		os.Exit(criuaction.CRIUAction())
	default:
		os.Exit(cli.Main(os.Args))
	}
}
