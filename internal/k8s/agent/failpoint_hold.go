//go:build cryo_failpoints

package agent

import (
	"os"
	"strings"

	fp "github.com/cryo-gpu/cryo/internal/failpoint"
)

// Built only with -tags cryo_failpoints (bin/failpoints/cryo), for the
// integration tests: CRYO_TEST_HOLD=agent-STEP:FILE holds the agent
// before STEP. It creates FILE and waits until it is removed (at most two
// minutes), so that a test can kill the agent mid-checkpoint.
func failpoint(step string) {
	want, file, ok := strings.Cut(os.Getenv("CRYO_TEST_HOLD"), ":")
	if !ok || want != "agent-"+step {
		return
	}
	fp.Wait(file)
}
