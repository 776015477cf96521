//go:build !cryo_failpoints

package orchestrate

// failpoint is where a test build may stop a sequence before a step
// (failpoint_hold.go, built with -tags cryo_failpoints). The shipped
// binary has none: this no-op is all it holds.
func failpoint([]string, string, StepName) {}

// skipConfine is where a test build may switch the confine step off, to
// prove that the check of the restored tasks stands alone; never here.
func skipConfine() bool { return false }
