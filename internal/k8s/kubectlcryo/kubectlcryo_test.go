package kubectlcryo

import (
	"bytes"
	"context"
	"strings"
	"testing"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/internal/progress"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRestoreFromTargets: only the three workload kinds, with a name,
// are accepted, before anything asks the API server.
func TestRestoreFromTargets(t *testing.T) {
	e := &env{}
	for _, target := range []string{"pod/web", "deployment", "deployment/", "daemonset/web", "web"} {
		err := e.restoreFrom(context.Background(), "ck", target, false)
		if err == nil || !strings.Contains(err.Error(), "want deployment/NAME") {
			t.Errorf("%s: %v", target, err)
		}
	}
}

func TestHuman(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 35746: "34.9 KiB", 3 << 30: "3.0 GiB"} {
		if got := progress.Human(n); got != want {
			t.Errorf("progress.Human(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestHelp: the usage names the plugin as its user types it.
func TestHelp(t *testing.T) {
	var out bytes.Buffer
	root := rootCommand(&out)
	root.SetOut(&out)
	root.SetArgs([]string{"checkpoint", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kubectl cryo checkpoint POD --to REPOSITORY") {
		t.Errorf("help:\n%s", out.String())
	}
}

// The build's and the push's lines carry their sizes.
func TestProgressLineBytes(t *testing.T) {
	cp := &cryov1.Checkpoint{ObjectMeta: metav1.ObjectMeta{Name: "first"}, Status: cryov1.CheckpointStatus{
		Phase: cryov1.PhasePushing, Progress: 77, Node: "n1", BytesDone: 1 << 30, BytesTotal: 4 << 30}}
	if got, want := progressLine(cp), "first: Pushing 77% on n1, 1.0 GiB of 4.0 GiB"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	cp.Status.Phase, cp.Status.Progress = cryov1.PhaseSucceeded, 100
	if got := progressLine(cp); strings.Contains(got, "GiB") {
		t.Errorf("a finished line with a count: %q", got)
	}
}
