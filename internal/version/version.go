// Package version is cryo's own version, stamped at build time. It is a leaf:
// the CLI prints it, the shim answers containerd's -v with it, and every
// checkpoint manifest records it, so a checkpoint says which cryo wrote it.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set by the build (make build: -X with `git describe`). A binary
// built without it falls back to the module version Go recorded, else "dev".
var Version = ""

// Commit is the source commit, set by the build like Version.
var Commit = ""

// String is the version, never empty.
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// Long is the version line of `cryo version`: version, commit, Go and platform.
func Long() string {
	c := Commit
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("cryo %s (commit %s, %s, %s/%s)", String(), c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
