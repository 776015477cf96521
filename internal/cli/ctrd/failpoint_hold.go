//go:build cryo_failpoints

package ctrd

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"
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
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		return
	}
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			return
		}
	}
}
