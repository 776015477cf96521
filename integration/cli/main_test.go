// Package cli holds the integration tests of the cryo command line end to
// end: bare processes, images, inspect, signals, the outcome checks. What
// only these tests use stays here; what several packages share is in
// integration/harness.
package cli

import (
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestMain is harness.Main: the binary also answers as the driver's helper.
func TestMain(m *testing.M) { harness.Main(m) }
