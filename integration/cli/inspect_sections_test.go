package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

const inspectSecret = "hunter2-do-not-print"

// TestInspectSeveralAndSections takes two checkpoints of one app (the
// first with --leave-running) and inspects them together and apart.
func TestInspectSeveralAndSections(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "MY_API_TOKEN="+inspectSecret, "PLAIN_SETTING=visible")
	p := harness.BareStartFakeApp(t, env, nil)
	pid := strconv.Itoa(p.PID)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	harness.BareCryo(t, env, "checkpoint", "--leave-running", "--pid", pid, "--dir", a)
	harness.BareCryo(t, env, "checkpoint", "--pid", pid, "--dir", b)
	killDumped(t, p)

	table := harness.BareCryo(t, env, "inspect", a, b)
	t.Logf("inspect a b:\n%s", table)
	harness.WantIn(t, table, "TARGET", "CHECKPOINTED", "GPUS", a, b, "complete")
	if n := strings.Count(strings.TrimSpace(table), "\n"); n != 2 {
		t.Errorf("want a header and two rows, got %d lines:\n%s", n+1, table)
	}
	var rows []struct {
		Target  string
		Summary struct{ Kind string }
	}
	wantJSON(t, "inspect --json a b", harness.BareCryo(t, env, "inspect", "--json", a, b), &rows)
	if len(rows) != 2 || rows[0].Target != a || rows[1].Summary.Kind != "process" {
		t.Errorf("inspect --json a b: %+v", rows)
	}

	// The full command line comes from the pages, the environment too,
	// with the token masked unless --show-secrets.
	tree := harness.BareCryo(t, env, "inspect", "--ps-tree", "--env", "--pid", pid, a)
	t.Logf("inspect --ps-tree --env --pid:\n%s", tree)
	harness.WantIn(t, tree, "Process tree", harness.FakeFile(t, "fakecuda-app")+" 50", "PLAIN_SETTING=visible", "MY_API_TOKEN=****")
	if strings.Contains(tree, inspectSecret) {
		t.Errorf("the secret was printed without --show-secrets:\n%s", tree)
	}
	harness.WantIn(t, harness.BareCryo(t, env, "inspect", "--env", "--show-secrets", a), "MY_API_TOKEN="+inspectSecret)
	if js := harness.BareCryo(t, env, "inspect", "--json", a); strings.Contains(js, inspectSecret) || strings.Contains(js, "PLAIN_SETTING") {
		t.Errorf("inspect --json without --env shows the environment:\n%s", js)
	}
	if out := harness.BareCryo(t, env, "inspect", "--mounts", "--files", a); strings.Contains(out, "Process tree") != true {
		t.Errorf("--files shows no process tree:\n%s", out)
	}
	harness.WantIn(t, harness.BareCryoFails(t, env, "inspect", "--pid", "999999", a), "has no process 999999", pid)

	// A corrupt manifest is reported as corrupt, exit 1.
	bad := filepath.Join(dir, "bad")
	harness.Run(t, harness.BareTimeout, nil, "cp", "-a", b, bad)
	if err := os.WriteFile(filepath.Join(bad, manifest.ManifestName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := harness.CryoSplit(t, env, "inspect", bad)
	if code != 1 || !strings.Contains(stderr, "not a valid cryo manifest") {
		t.Errorf("inspect of a corrupt manifest: exit %d, stderr %q", code, stderr)
	}

	list := harness.BareCryo(t, env, "inspect", "list", dir)
	t.Logf("inspect list:\n%s", list)
	harness.WantIn(t, list, a, b, bad, "complete", "not a valid cryo manifest")
	var listed []struct{ Target, Kind, State string }
	wantJSON(t, "inspect list --json", harness.BareCryo(t, env, "inspect", "list", "--json", dir), &listed)
	if len(listed) != 3 || listed[0].Kind != "process" || listed[0].State != "complete" {
		t.Errorf("inspect list --json: %+v", listed)
	}
}

// TestInspectInterruptedBeforeDump: Ctrl-C while cryo is about to dump
// rolls the checkpoint back and marks the directory partial (its images
// removed); inspect names that, exit 0, not refused as an unknown source.
func TestInspectInterruptedBeforeDump(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	cmd, hold, out := startHeldCheckpoint(t, env, p, img, "dump")
	interruptHeld(t, cmd, hold, out, syscall.SIGINT)
	if err := cmd.Wait(); err == nil {
		t.Fatalf("the interrupted checkpoint succeeded:\n%s", out)
	}
	p.WaitTicks(t, p.LastTick(t)+3)
	got := harness.BareCryo(t, env, "inspect", img)
	t.Logf("inspect of the interrupted checkpoint:\n%s", got)
	harness.WantIn(t, got, "failed before CRIU's dump completed", "interrupted by SIGINT", "images were removed", "re-take")
	var sum struct {
		Unfinished   bool
		Interruption string
	}
	wantJSON(t, "inspect --json", harness.BareCryo(t, env, "inspect", "--json", img), &sum)
	if !sum.Unfinished || sum.Interruption != string(manifest.DumpFailedRemoved) {
		t.Errorf("inspect --json: %+v", sum)
	}
}

// TestInspectAbandonedAfterFullDisk: a dump that completed, then was
// abandoned when the last manifest write hit a full disk (the processes
// ran on, its images were removed), is called stale, not "interrupted
// before CRIU's dump".
func TestInspectAbandonedAfterFullDisk(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := harness.BareStartFakeApp(t, env, nil)
	img, _ := fullDiskCheckpoint(t, env, p)
	got := harness.BareCryo(t, env, "inspect", img)
	t.Logf("inspect of the abandoned checkpoint:\n%s", got)
	harness.WantIn(t, got, "its dump completed, then the run failed", "stale", "no space left", "re-take")
	if strings.Contains(got, "before CRIU's dump completed") {
		t.Errorf("the abandoned dump is called interrupted before its dump:\n%s", got)
	}
	var sum struct{ Interruption string }
	if err := json.Unmarshal([]byte(harness.BareCryo(t, env, "inspect", "--json", img)), &sum); err != nil || sum.Interruption != string(manifest.DumpStaleRemoved) {
		t.Errorf("inspect --json: %+v, %v", sum, err)
	}
}

// TestInspectArchiveCommandLines: an export tar and an image of the store
// are summarised without their pages, but --ps-tree and --env read the
// pages that hold the command line and the environment from them.
func TestInspectArchiveCommandLines(t *testing.T) {
	harness.RequireRoot(t)
	env := append(harness.FakeDriverEnv(t, ""), "MY_API_TOKEN="+inspectSecret)
	p := harness.BareStartFakeApp(t, env, nil)
	dir := t.TempDir()
	img, tarPath, store := filepath.Join(dir, "img"), filepath.Join(dir, "export.tar"), filepath.Join(dir, "store")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	harness.BareCryo(t, env, "image", "export", img, tarPath)
	harness.BareCryo(t, env, "image", "build", "--store", store, img, "localhost:5999/inspect/args:v1")
	full := harness.FakeFile(t, "fakecuda-app") + " 50"
	for _, target := range [][]string{{tarPath}, {"--store", store, "localhost:5999/inspect/args:v1"}} {
		out := harness.BareCryo(t, env, append([]string{"inspect", "--ps-tree", "--env"}, target...)...)
		t.Logf("inspect --ps-tree --env %v:\n%s", target, out)
		harness.WantIn(t, out, full, "MY_API_TOKEN=****")
		if strings.Contains(out, inspectSecret) {
			t.Errorf("%v: the secret was printed", target)
		}
	}
	// The several-target table reads the tar and the store image locally.
	table := harness.BareCryo(t, env, "inspect", "--store", store, img, tarPath, "localhost:5999/inspect/args:v1")
	harness.WantIn(t, table, img, tarPath, "localhost:5999/inspect/args:v1")
	list := harness.BareCryo(t, env, "inspect", "list", "--store="+store)
	harness.WantIn(t, list, "localhost:5999/inspect/args:v1", "process")
}

// TestInspectContainerdImagePath: `ctr task checkpoint --image-path DIR`
// through the shim leaves a container's bare CRIU images; inspect calls
// it that (not a process) and names the container.
func TestInspectContainerdImagePath(t *testing.T) {
	d := harness.StartDaemon(t, harness.CtrdVersions[1])
	d.ImportTestImage()
	d.RunApp("ipi")
	dir := filepath.Join(d.Dir, "images")
	if out, err := d.CtrBinErr(d.CtrWithOptions(), "task", "checkpoint", "--image-path", dir, "ipi"); err != nil {
		t.Fatalf("ctr task checkpoint --image-path %s: %v\n%s", dir, err, out)
	}
	out := harness.BareCryo(t, nil, "inspect", "--mounts", dir)
	t.Logf("inspect of the --image-path directory:\n%s", out)
	harness.WantIn(t, out, "Kind:         container-images", "ID:           ipi", "Mounts")
	d.Remove("ipi")
}
