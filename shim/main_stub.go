// Package shim is the containerd shim v2 (containerd-shim-cryo-v2).
package shim

// TEMPORARY stub: the shim owner replaces this file.

import "os"

// Main runs the shim; it is called by the multi-call cryo binary.
func Main() { os.Exit(1) }
