package harness

import (
	"os"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda"
)

// Main, every TestMain: this test binary is also the driver's helper. The tests that
// call the driver in-process (the doctor's checks, `cryo ps`'s states,
// locks taken through the driver) re-execute it as cryo's driver calls
// re-execute cryo, whose main chooses the helper in the same way; without
// this, the child would run the whole suite again instead of answering.
func Main(m *testing.M) {
	if cuda.HelperRequested() {
		os.Exit(cuda.RunHelper())
	}
	os.Exit(m.Run())
}
