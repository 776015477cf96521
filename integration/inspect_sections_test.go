package integration

// `cryo inspect` beyond one summary, on real CRIU checkpoints of the fake
// CUDA app: several targets in one table, the section flags (the process
// tree with full command lines, --env with secrets masked, --pid), `cryo
// inspect list`, a corrupt manifest, and the kind of an interrupted
// checkpoint (Ctrl-C before the dump, a dump abandoned after a full disk).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

const inspectSecret = "hunter2-do-not-print"

// TestInspectSeveralAndSections takes two checkpoints of one app (the
// first with --leave-running) and inspects them together and apart.
func TestInspectSeveralAndSections(t *testing.T) {
	requireRoot(t)
	env := append(fakeDriverEnv(t, ""), "MY_API_TOKEN="+inspectSecret, "PLAIN_SETTING=visible")
	p := bareStartFakeApp(t, env, nil)
	pid := strconv.Itoa(p.pid)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	bareCryo(t, env, "checkpoint", "--leave-running", "--pid", pid, "--dir", a)
	bareCryo(t, env, "checkpoint", "--pid", pid, "--dir", b)
	killDumped(t, p)

	table := bareCryo(t, env, "inspect", a, b)
	t.Logf("inspect a b:\n%s", table)
	wantIn(t, table, "TARGET", "CHECKPOINTED", "GPUS", a, b, "complete")
	if n := strings.Count(strings.TrimSpace(table), "\n"); n != 2 {
		t.Errorf("want a header and two rows, got %d lines:\n%s", n+1, table)
	}
	var rows []struct {
		Target  string
		Summary struct{ Kind string }
	}
	wantJSON(t, "inspect --json a b", bareCryo(t, env, "inspect", "--json", a, b), &rows)
	if len(rows) != 2 || rows[0].Target != a || rows[1].Summary.Kind != "process" {
		t.Errorf("inspect --json a b: %+v", rows)
	}

	// The full command line comes from the pages, the environment too,
	// with the token masked unless --show-secrets.
	tree := bareCryo(t, env, "inspect", "--ps-tree", "--env", "--pid", pid, a)
	t.Logf("inspect --ps-tree --env --pid:\n%s", tree)
	wantIn(t, tree, "Process tree", fakeFile(t, "fakecuda-app")+" 50", "PLAIN_SETTING=visible", "MY_API_TOKEN=****")
	if strings.Contains(tree, inspectSecret) {
		t.Errorf("the secret was printed without --show-secrets:\n%s", tree)
	}
	wantIn(t, bareCryo(t, env, "inspect", "--env", "--show-secrets", a), "MY_API_TOKEN="+inspectSecret)
	if js := bareCryo(t, env, "inspect", "--json", a); strings.Contains(js, inspectSecret) || strings.Contains(js, "PLAIN_SETTING") {
		t.Errorf("inspect --json without --env shows the environment:\n%s", js)
	}
	if out := bareCryo(t, env, "inspect", "--mounts", "--files", a); strings.Contains(out, "Process tree") != true {
		t.Errorf("--files shows no process tree:\n%s", out)
	}
	wantIn(t, bareCryoFails(t, env, "inspect", "--pid", "999999", a), "has no process 999999", pid)

	// A corrupt manifest is reported as corrupt, exit 1.
	bad := filepath.Join(dir, "bad")
	run(t, bareTimeout, nil, "cp", "-a", b, bad)
	if err := os.WriteFile(filepath.Join(bad, manifest.ManifestName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := cryoSplit(t, env, "inspect", bad)
	if code != 1 || !strings.Contains(stderr, "not a valid cryo manifest") {
		t.Errorf("inspect of a corrupt manifest: exit %d, stderr %q", code, stderr)
	}

	list := bareCryo(t, env, "inspect", "list", dir)
	t.Logf("inspect list:\n%s", list)
	wantIn(t, list, a, b, bad, "complete", "not a valid cryo manifest")
	var listed []struct{ Target, Kind, State string }
	wantJSON(t, "inspect list --json", bareCryo(t, env, "inspect", "list", "--json", dir), &listed)
	if len(listed) != 3 || listed[0].Kind != "process" || listed[0].State != "complete" {
		t.Errorf("inspect list --json: %+v", listed)
	}
}

// TestInspectInterruptedBeforeDump: Ctrl-C while cryo is about to dump
// rolls the checkpoint back and marks the directory partial (its images
// removed); inspect names that, exit 0, not refused as an unknown source.
func TestInspectInterruptedBeforeDump(t *testing.T) {
	requireRoot(t)
	env := append(fakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	cmd, hold, out := startHeldCheckpoint(t, env, p, img, "dump")
	interruptHeld(t, cmd, hold, out, syscall.SIGINT)
	if err := cmd.Wait(); err == nil {
		t.Fatalf("the interrupted checkpoint succeeded:\n%s", out)
	}
	p.waitTicks(t, p.lastTick(t)+3)
	got := bareCryo(t, env, "inspect", img)
	t.Logf("inspect of the interrupted checkpoint:\n%s", got)
	wantIn(t, got, "failed before CRIU's dump completed", "interrupted by SIGINT", "images were removed", "re-take")
	var sum struct {
		Unfinished   bool
		Interruption string
	}
	wantJSON(t, "inspect --json", bareCryo(t, env, "inspect", "--json", img), &sum)
	if !sum.Unfinished || sum.Interruption != string(manifest.DumpFailedRemoved) {
		t.Errorf("inspect --json: %+v", sum)
	}
}

// TestInspectAbandonedAfterFullDisk: a dump that completed, then was
// abandoned when the last manifest write hit a full disk (the processes
// ran on, its images were removed), is called stale, not "interrupted
// before CRIU's dump".
func TestInspectAbandonedAfterFullDisk(t *testing.T) {
	requireRoot(t)
	env := append(fakeDriverEnv(t, ""), "CRYO_DIGEST_WATCH=0")
	p := bareStartFakeApp(t, env, nil)
	img, _ := fullDiskCheckpoint(t, env, p)
	got := bareCryo(t, env, "inspect", img)
	t.Logf("inspect of the abandoned checkpoint:\n%s", got)
	wantIn(t, got, "its dump completed, then the run failed", "stale", "no space left", "re-take")
	if strings.Contains(got, "before CRIU's dump completed") {
		t.Errorf("the abandoned dump is called interrupted before its dump:\n%s", got)
	}
	var sum struct{ Interruption string }
	if err := json.Unmarshal([]byte(bareCryo(t, env, "inspect", "--json", img)), &sum); err != nil || sum.Interruption != string(manifest.DumpStaleRemoved) {
		t.Errorf("inspect --json: %+v, %v", sum, err)
	}
}

// TestInspectArchiveCommandLines: an export tar and an image of the store
// are summarised without their pages, but --ps-tree and --env read the
// pages that hold the command line and the environment from them.
func TestInspectArchiveCommandLines(t *testing.T) {
	requireRoot(t)
	env := append(fakeDriverEnv(t, ""), "MY_API_TOKEN="+inspectSecret)
	p := bareStartFakeApp(t, env, nil)
	dir := t.TempDir()
	img, tarPath, store := filepath.Join(dir, "img"), filepath.Join(dir, "export.tar"), filepath.Join(dir, "store")
	bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	killDumped(t, p)
	bareCryo(t, env, "image", "export", img, tarPath)
	bareCryo(t, env, "image", "build", "--store", store, img, "localhost:5999/inspect/args:v1")
	full := fakeFile(t, "fakecuda-app") + " 50"
	for _, target := range [][]string{{tarPath}, {"--store", store, "localhost:5999/inspect/args:v1"}} {
		out := bareCryo(t, env, append([]string{"inspect", "--ps-tree", "--env"}, target...)...)
		t.Logf("inspect --ps-tree --env %v:\n%s", target, out)
		wantIn(t, out, full, "MY_API_TOKEN=****")
		if strings.Contains(out, inspectSecret) {
			t.Errorf("%v: the secret was printed", target)
		}
	}
	// The several-target table reads the tar and the store image locally.
	table := bareCryo(t, env, "inspect", "--store", store, img, tarPath, "localhost:5999/inspect/args:v1")
	wantIn(t, table, img, tarPath, "localhost:5999/inspect/args:v1")
	list := bareCryo(t, env, "inspect", "list", "--store="+store)
	wantIn(t, list, "localhost:5999/inspect/args:v1", "process")
}

// TestInspectContainerdImagePath: `ctr task checkpoint --image-path DIR`
// through the shim leaves a container's bare CRIU images; inspect calls
// it that (not a process) and names the container.
func TestInspectContainerdImagePath(t *testing.T) {
	d := startDaemon(t, ctrdVersions[1])
	d.importTestImage()
	d.runApp("ipi")
	dir := filepath.Join(d.dir, "images")
	if out, err := d.ctrBinErr(d.ctrWithOptions(), "task", "checkpoint", "--image-path", dir, "ipi"); err != nil {
		t.Fatalf("ctr task checkpoint --image-path %s: %v\n%s", dir, err, out)
	}
	out := bareCryo(t, nil, "inspect", "--mounts", dir)
	t.Logf("inspect of the --image-path directory:\n%s", out)
	wantIn(t, out, "Kind:         container-images", "ID:           ipi", "Mounts")
	d.remove("ipi")
}
