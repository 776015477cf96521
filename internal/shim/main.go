// Package shim is cryo's containerd shim v2: containerd-shim-cryo-v2, runtime
// type io.containerd.cryo.v2. It serves containerd's own runc task service
// and adds cryo's CUDA orchestration around Checkpoint and around Create and
// Start of a task restored from a checkpoint.
//
// One binary serves containerd 1.7 and 2.x. containerd 1.7 refuses a shim
// whose `start` reports a bootstrap version above 2, and containerd 2.x's
// pkg/shim prints version 3, so `start` is handled here: it prints the plain
// socket address (read as version 2 by both), writes ./address, and the
// server registers the task API under both the v2 and the v3 service names.
package shim

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/pkg/shim"
	ctrdversion "github.com/containerd/containerd/v2/version"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/version"
)

const (
	// RuntimeName is the runtime type containerd's configuration names.
	RuntimeName = "io.containerd.cryo.v2"
	// BinaryName is the name containerd derives from RuntimeName and looks
	// up in PATH; the multi-call cryo binary dispatches on it.
	BinaryName = "containerd-shim-cryo-v2"
)

// Main runs the shim; it is called by the multi-call cryo binary.
func Main() {
	inv, ok := parseInvocation()
	if ok && inv.action == "start" {
		startMain(inv)
		return
	}
	if ok && inv.version {
		// containerd's shim library would print only its own version:
		// a user asking which cryo the node runs wants cryo's.
		fmt.Printf("%s:\n  Version:  %s\n  Commit:   %s\n  containerd shim library: %s\n", BinaryName, version.String(), version.Commit, ctrdversion.Version)
		return
	}
	criuFirstOnPath()
	registerTaskPlugin()
	shim.Run(context.Background(), newManager())
}

// criuFirstOnPath puts $CRYO_CRIU's directory first on the shim's PATH:
// containerd's runc shim code runs runc with the shim's environment, and
// runc starts the criu it finds on PATH, not the one cryo checked.
func criuFirstOnPath() {
	env := config.CRIUFirst(os.Environ(), os.Getenv(config.EnvCRIU))
	if p := config.Lookup(env, "PATH"); p != os.Getenv("PATH") {
		os.Setenv("PATH", p)
	}
	// And CRIU's seccomp filter directory, for the outcome check.
	if os.Getenv(config.EnvCRIUSeccompDir) == "" {
		os.Setenv(config.EnvCRIUSeccompDir, config.DefaultSeccompDir)
	}
}
