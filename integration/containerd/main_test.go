// Package containerd holds the integration tests of cryo's containerd shim
// end to end, with real containerd releases. What only these tests use
// stays here; what several packages share is in integration/harness.
package containerd

import (
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestMain is harness.Main: the binary also answers as the driver's helper.
func TestMain(m *testing.M) { harness.Main(m) }
