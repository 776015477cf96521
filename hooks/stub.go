// Package hooks holds the entry points that runc and CRIU call back into.
package hooks

// TEMPORARY stub: the hooks owner replaces this file.

// CRIUAction runs as CRIU's action script and returns the exit code.
func CRIUAction() int { return 0 }
