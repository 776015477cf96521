// Package criu holds the integration tests of cryo's CRIU build: its
// patches, zero pages, fills and CRIU's own zdtm suite. What only these
// tests use stays here; what several packages share is in
// integration/harness.
package criu

import (
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestMain is harness.Main: the binary also answers as the driver's helper.
func TestMain(m *testing.M) { harness.Main(m) }
