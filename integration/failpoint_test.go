package integration

// The failpoints (CRYO_TEST_HOLD: hold a checkpoint before a step) are not
// in bin/cryo: they are compiled only with -tags cryo_failpoints, into
// bin/failpoints by `make failpoints`. The tests that hold a checkpoint run
// that binary, which the first of them builds (once per test binary, so
// that it always matches the checkout), unless $CRYO_FAILPOINT_BIN names a
// directory that holds one already.

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var failpoints struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}

// failpointBin returns the path of one of cryo's names (cryo, cryo-runc,
// …) in the build with failpoints, building it first if need be.
func failpointBin(t testing.TB, name string) string {
	t.Helper()
	failpoints.once.Do(buildFailpoints)
	if failpoints.err != nil {
		t.Fatalf("building cryo with failpoints (make failpoints): %v\n%s", failpoints.err, failpoints.out)
	}
	p := filepath.Join(failpoints.dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s missing (%v): run `make failpoints`", p, err)
	}
	return p
}

func buildFailpoints() {
	if d := os.Getenv("CRYO_FAILPOINT_BIN"); d != "" {
		failpoints.dir = d
		return
	}
	// The Makefile's target, so that the flags (version, trimpath) are
	// bin/cryo's own.
	cmd := exec.Command("make", "--no-print-directory", "-C", repoRoot(), "failpoints")
	failpoints.out, failpoints.err = cmd.CombinedOutput()
	failpoints.dir = filepath.Join(repoRoot(), "bin", "failpoints")
}

// withRuntime makes Podman run runtime (a cryo-runc) in place of bin's.
func (p *podmanEnv) withRuntime(runtime string) {
	for i := range p.args[:len(p.args)-1] {
		if p.args[i] == "--runtime" {
			p.args[i+1] = runtime
		}
	}
}
