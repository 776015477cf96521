// Command cryo is one multi-call binary, to keep the bundle small: called as
// containerd-shim-cryo-v2 it is the containerd shim, as cryo-runc the
// runc-compatible runtime, as cryo-criu-action CRIU's action script, and as
// cryo the user CLI.
package main

import (
	"os"
	"path/filepath"

	"github.com/cryo-gpu/cryo/cmd/cryo/cli"
	"github.com/cryo-gpu/cryo/hooks"
	"github.com/cryo-gpu/cryo/runcwrap"
	"github.com/cryo-gpu/cryo/shim"
)

func main() {
	switch filepath.Base(os.Args[0]) {
	case "containerd-shim-cryo-v2":
		shim.Main()
	case "cryo-runc":
		os.Exit(runcwrap.Main(os.Args[1:]))
	case "cryo-criu-action":
		os.Exit(hooks.CRIUAction())
	default:
		os.Exit(cli.Main(os.Args))
	}
}
