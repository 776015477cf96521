//go:build cryo_failpoints

package orchestrate

import (
	"os"
	"strings"
	"sync/atomic"

	fp "github.com/cryo-gpu/cryo/internal/failpoint"
)

// Built only with -tags cryo_failpoints, for the integration tests (see
// integration/harness/failpoint.go): the shipped binary does not know the
// variable below.

// envHold, "[OP/]STEP:FILE", holds a sequence before STEP (or "final",
// the last write of a checkpoint's manifest): the run creates FILE and
// waits until it is removed. OP is the runner's key ("checkpoint",
// "restore", "pause", "resume"); without it the hold is a checkpoint's.
// Tests kill cryo, signal it, or fill the disk, at a chosen step with it.
const envHold = "CRYO_TEST_HOLD"

// held makes a hold happen once per process: a restore's resume step is
// also the first step of the inner sequence it runs (ResumeRestored), and
// a second hold of the same name would wait for a file nobody removes.
var held atomic.Bool

// failpoint holds a sequence before step s when envHold, in the entry
// point's environment, names op and s.
func failpoint(environ []string, op string, s StepName) {
	want, file, ok := strings.Cut(holdSetting(environ), ":")
	wantOp, wantStep, named := strings.Cut(want, "/")
	if !named {
		wantOp, wantStep = "checkpoint", want
	}
	if !ok || op != wantOp || wantStep != string(s) || held.Swap(true) {
		return
	}
	fp.Wait(file)
}

// holdSetting is envHold from the entry point's environment, the env file
// of cryo-runc included (Config.Environ): the last setting wins, as for
// every other variable. "@PATH" reads the setting from file PATH at each
// step: a shim has containerd's environment, fixed when the daemon
// started, and a test holds each of its restores at another step.
func holdSetting(environ []string) string {
	v := ""
	for _, kv := range environ {
		if val, ok := strings.CutPrefix(kv, envHold+"="); ok {
			v = val
		}
	}
	if path, ok := strings.CutPrefix(v, "@"); ok {
		data, _ := os.ReadFile(path)
		v = strings.TrimSpace(string(data))
	}
	return v
}

// envSkipConfine=1 switches off the confine step of a restore's check, so
// that a test can prove that the check of the restored tasks at CRIU's
// pre-resume (package confine/outcome) refuses on its own what the
// confine step would have refused first.
const envSkipConfine = "CRYO_TEST_SKIP_CONFINE"

func skipConfine() bool { return os.Getenv(envSkipConfine) == "1" }
