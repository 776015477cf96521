package harness

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

// FailpointBin returns the path of one of cryo's names (cryo, cryo-runc,
// …) in the build with failpoints, building it first if need be.
func FailpointBin(t testing.TB, name string) string {
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
	cmd := exec.Command("make", "--no-print-directory", "-C", RepoRoot(), "failpoints")
	failpoints.out, failpoints.err = cmd.CombinedOutput()
	failpoints.dir = filepath.Join(RepoRoot(), "bin", "failpoints")
}

// withRuntime makes Podman run runtime (a cryo-runc) in place of bin's.
func (p *PodmanEnv) WithRuntime(runtime string) {
	for i := range p.Args[:len(p.Args)-1] {
		if p.Args[i] == "--runtime" {
			p.Args[i+1] = runtime
		}
	}
}
