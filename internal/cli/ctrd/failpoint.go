//go:build !cryo_failpoints

package ctrd

// failpoint is where a test build may hold a restore before a step
// (failpoint_hold.go, built with -tags cryo_failpoints); the shipped
// binary has no failpoint.
func failpoint(string) {}
