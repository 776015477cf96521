// Package k8s holds the integration tests of cryo under Kubernetes:
// containerd's CRI, a real kubelet, the Helm chart, the controller and the
// node agent. What only these tests use stays here; what several packages
// share is in integration/harness.
package k8s

import (
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestMain is harness.Main: the binary also answers as the driver's helper.
func TestMain(m *testing.M) { harness.Main(m) }
