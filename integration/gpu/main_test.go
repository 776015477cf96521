// Package gpu holds the integration tests of the GPU acceptance tests and
// benchmarks (real driver, skipped without a GPU) and the multi-GPU maps of
// the fake driver. What only these tests use stays here; what several
// packages share is in integration/harness.
package gpu

import (
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestMain is harness.Main: the binary also answers as the driver's helper.
func TestMain(m *testing.M) { harness.Main(m) }
