package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedUpToDate runs controller-gen (from the tools module, as
// make generate does) into a temporary directory and fails when the deep
// copies or the chart's CRD differ from what is committed: a field added
// to the types without `make generate` would reach the cluster without its
// schema, and the apiserver would prune it.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds controller-gen")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	gen := filepath.Join(tmp, "controller-gen")
	run(t, filepath.Join(root, "tools"), "go", "build", "-o", gen, "sigs.k8s.io/controller-tools/cmd/controller-gen")
	out := filepath.Join(tmp, "out")
	run(t, root, gen, "object", "crd", "paths=./api/...", "output:dir="+out)
	same(t, filepath.Join(out, "zz_generated.deepcopy.go"), filepath.Join(root, "api/v1alpha1/zz_generated.deepcopy.go"))
	same(t, filepath.Join(out, "cryo.io_checkpoints.yaml"), filepath.Join(root, "deploy/helm/cryo/crds/cryo.io_checkpoints.yaml"))
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, b)
	}
}

func same(t *testing.T, fresh, committed string) {
	t.Helper()
	want, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s is stale: run `make generate` and commit the result", committed)
	}
}
