package cuda

import (
	"os"
	"testing"
)

// A test binary that calls the driver re-executes itself as the helper
// (helperExe), like cryo does, but has no main of cryo's to choose
// RunHelper: without this, the child would run the whole test suite again
// instead of serving the request. So in a test binary, and only there
// (testing.Testing is false in cryo's binary, where cmd/cryo chooses), the
// package chooses the helper itself, before the tests start.
//
// It can go once every test binary that calls the driver (this package's,
// internal/doctor's, internal/orchestrate's) chooses the helper first thing
// in its TestMain: if HelperRequested() { os.Exit(RunHelper()) }.
func init() {
	if testing.Testing() && HelperRequested() {
		os.Exit(RunHelper())
	}
}
