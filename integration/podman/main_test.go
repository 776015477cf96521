// Package podman holds the integration tests of cryo-runc end to end, alone
// and under Podman. What only these tests use stays here; what several
// packages share is in integration/harness.
package podman

import (
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestMain is harness.Main: the binary also answers as the driver's helper.
func TestMain(m *testing.M) { harness.Main(m) }
