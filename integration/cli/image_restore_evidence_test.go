package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestImageRestoreKeepsCRIULog: a restore from an image that CRIU refuses
// (a file the process held open changed size since the checkpoint) fails
// with CRIU's cause, not the rlimit line CRIU logs on every run, and names
// a copy of CRIU's log that outlives the removed work directory.
func TestImageRestoreKeepsCRIULog(t *testing.T) {
	harness.RequireRoot(t)
	restoreDir := t.TempDir()
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_RESTORE_DIR="+restoreDir)
	store := filepath.Join(t.TempDir(), "store")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	ref := "localhost:5999/evidence/app:v1"
	harness.BareCryo(t, env, "image", "build", img, ref, "--store", store, "-q")

	// The app's output file grows after the checkpoint: CRIU refuses it.
	f, err := os.OpenFile(filepath.Join(p.Dir, "out"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(strings.Repeat("grown after the checkpoint\n", 100))
	f.Close()

	_, stderr, code := harness.CryoSplit(t, env, "image", "restore", ref, "--store", store)
	if code == 0 {
		t.Fatalf("the restore of a checkpoint whose file changed succeeded:\n%s", stderr)
	}
	if !strings.Contains(stderr, "bad size") || strings.Contains(stderr, "RLIMIT") {
		t.Fatalf("the error does not quote CRIU's cause:\n%s", stderr)
	}
	m := regexp.MustCompile(`CRIU log: (\S+?)\)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("the error names no CRIU log:\n%s", stderr)
	}
	if !strings.HasPrefix(m[1], filepath.Join(restoreDir, "logs")) {
		t.Fatalf("the CRIU log named is %s, not a kept copy under %s/logs", m[1], restoreDir)
	}
	data, err := os.ReadFile(m[1])
	if err != nil || !strings.Contains(string(data), "bad size") {
		t.Fatalf("the kept CRIU log %s: %v", m[1], err)
	}
	if works, _ := filepath.Glob(filepath.Join(restoreDir, "image-*")); len(works) > 0 {
		t.Fatalf("the work directory stayed: %v", works)
	}
}
