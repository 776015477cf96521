package doctor

import (
	"os"
	"testing"

	"github.com/cryo-gpu/cryo/internal/cuda"
)

// TestMain: this test binary is also the driver's helper. The doctor's
// driver checks re-execute it, as they re-execute cryo, whose main chooses
// the helper in the same way.
func TestMain(m *testing.M) {
	if cuda.HelperRequested() {
		os.Exit(cuda.RunHelper())
	}
	os.Exit(m.Run())
}
