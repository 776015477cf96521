package kubectlcryo

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/progress"
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
