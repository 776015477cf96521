//go:build cryo_failpoints

package ctrd

import (
	"os"
	"strings"

	fp "github.com/cryo-gpu/cryo/internal/failpoint"
)

// Built only with -tags cryo_failpoints (bin/failpoints/cryo), for the
// integration tests: CRYO_TEST_HOLD=ctrd-restore/STEP:FILE holds a
// restore into containerd before STEP (RestoreSteps). It creates FILE and
// waits until it is removed (at most two minutes), so that a test can
// signal or kill cryo at that step.
func failpoint(step string) {
	want, file, ok := strings.Cut(os.Getenv("CRYO_TEST_HOLD"), ":")
	if !ok || want != "ctrd-restore/"+step {
		return
	}
	fp.Wait(file)
}
