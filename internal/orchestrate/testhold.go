package orchestrate

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"
)

// holdForTest, with $CRYO_TEST_HOLD set to "STEP:FILE", stops a checkpoint
// before STEP: it creates FILE and waits (at most two minutes) until FILE
// is removed. Tests use it to kill cryo, or to fill the disk, at a chosen
// step; it has no other use.
func (o *Orchestrator) holdForTest(s Step) {
	step, file, ok := strings.Cut(o.Config.TestHold, ":")
	if !ok || step != string(s) {
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

// stepFinal names, for holdForTest only, the last write of the manifest.
const stepFinal Step = "final"
