// Package runcwrap is cryo-runc, the runc-compatible runtime.
package runcwrap

// TEMPORARY stub: the cryo-runc owner replaces this file.

// Main runs cryo-runc with the arguments after argv[0] and returns the exit code.
func Main(args []string) int { return 1 }
