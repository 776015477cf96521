package criuaction

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/confine/outcome"
)

// The action script's choice, from CRIU's variables and cryo's: the
// outcome check at pre-resume outranks every other setting (it is the
// authority behind the earlier checks, whoever orchestrates), cryo-runc's
// own orchestration and an outcome-only script stand by, and only the four
// actions cryo acts on reach the orchestration. envNow reads the same
// names from the environment.
func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want decision
	}{
		{"pre-dump of a direct runc checkpoint", map[string]string{"CRTOOLS_SCRIPT_ACTION": "pre-dump"}, doStep},
		{"post-dump", map[string]string{"CRTOOLS_SCRIPT_ACTION": "post-dump"}, doStep},
		{"pre-restore", map[string]string{"CRTOOLS_SCRIPT_ACTION": "pre-restore"}, doStep},
		{"post-resume", map[string]string{"CRTOOLS_SCRIPT_ACTION": "post-resume"}, doStep},
		{"an action cryo ignores", map[string]string{"CRTOOLS_SCRIPT_ACTION": "network-lock"}, doNothing},
		{"post-restore: the tasks are still stopped", map[string]string{"CRTOOLS_SCRIPT_ACTION": "post-restore"}, doNothing},
		{"no action at all", map[string]string{}, doNothing},
		{"an action's name in another case", map[string]string{"CRTOOLS_SCRIPT_ACTION": "PRE-DUMP"}, doNothing},
		{"cryo-runc orchestrates", map[string]string{"CRTOOLS_SCRIPT_ACTION": "pre-dump", "CRYO_ORCHESTRATED": "1"}, doNothing},
		{"orchestrated must be exactly 1", map[string]string{"CRTOOLS_SCRIPT_ACTION": "pre-dump", "CRYO_ORCHESTRATED": "true"}, doStep},
		{"outcome-only script, other action", map[string]string{"CRTOOLS_SCRIPT_ACTION": "pre-restore", "CRYO_OUTCOME_ONLY": "1"}, doNothing},
		{"pre-resume with a bundle", map[string]string{"CRTOOLS_SCRIPT_ACTION": "pre-resume", "CRYO_BUNDLE": "/b"}, doVerify},
		{"pre-resume with a bundle, orchestrated", map[string]string{"CRTOOLS_SCRIPT_ACTION": "pre-resume", "CRYO_BUNDLE": "/b", "CRYO_ORCHESTRATED": "1"}, doVerify},
		{"pre-resume with a bundle, outcome-only", map[string]string{"CRTOOLS_SCRIPT_ACTION": "pre-resume", "CRYO_BUNDLE": "/b", "CRYO_OUTCOME_ONLY": "1"}, doVerify},
		{"pre-resume without a bundle", map[string]string{"CRTOOLS_SCRIPT_ACTION": "pre-resume"}, doNothing},
		{"a bundle at another action", map[string]string{"CRTOOLS_SCRIPT_ACTION": "post-resume", "CRYO_BUNDLE": "/b"}, doStep},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"CRTOOLS_SCRIPT_ACTION", "CRYO_BUNDLE", "CRYO_ORCHESTRATED", "CRYO_OUTCOME_ONLY"} {
				t.Setenv(k, c.env[k])
			}
			if envNow() != (actionEnv{action: c.env["CRTOOLS_SCRIPT_ACTION"], bundle: c.env["CRYO_BUNDLE"],
				orchestrated: c.env["CRYO_ORCHESTRATED"], outcomeOnly: c.env["CRYO_OUTCOME_ONLY"]}) {
				t.Fatalf("envNow() = %+v from %v", envNow(), c.env)
			}
			e := actionEnv{action: c.env["CRTOOLS_SCRIPT_ACTION"], bundle: c.env["CRYO_BUNDLE"],
				orchestrated: c.env["CRYO_ORCHESTRATED"], outcomeOnly: c.env["CRYO_OUTCOME_ONLY"]}
			if got := decide(e); got != c.want {
				t.Errorf("decide(%v) = %d, want %d", c.env, got, c.want)
			}
		})
	}
}

// OutcomeOnly chooses the action-script personality for a cryo that the
// outcome check's script execs under any name: only with both its own
// mark and CRIU's action variable, which a cryo command started from an
// action (inheriting CRTOOLS_*) lacks the first of.
func TestOutcomeOnly(t *testing.T) {
	for _, c := range []struct {
		only, action string
		want         bool
	}{
		{"1", "pre-resume", true},
		{"1", "", false},
		{"", "pre-resume", false},
		{"0", "pre-resume", false},
	} {
		t.Setenv("CRYO_OUTCOME_ONLY", c.only)
		t.Setenv("CRTOOLS_SCRIPT_ACTION", c.action)
		if got := OutcomeOnly(); got != c.want {
			t.Errorf("CRYO_OUTCOME_ONLY=%q CRTOOLS_SCRIPT_ACTION=%q: %v, want %v", c.only, c.action, got, c.want)
		}
	}
}

// CRTOOLS_INIT_PID is CRIU 4's; its absence (CRIU 3) or any value that is
// no pid fails with a remedy, never as pid 0 (which would mean "this
// process group" to kill).
func TestInitPID(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int
	}{{"4242", 4242}, {"1", 1}, {"", 0}, {"0", 0}, {"-5", 0}, {"12x", 0}, {" 7", 0}} {
		t.Setenv("CRTOOLS_INIT_PID", c.v)
		got, err := initPID()
		if got != c.want || (c.want == 0) != (err != nil) {
			t.Errorf("CRTOOLS_INIT_PID=%q: %d, %v; want %d", c.v, got, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "CRIU 4.0 or newer") {
			t.Errorf("CRTOOLS_INIT_PID=%q: %v names no remedy", c.v, err)
		}
	}
}

func TestContainerID(t *testing.T) {
	t.Setenv("CRTOOLS_INIT_PID", "77")
	t.Setenv("CRYO_CONTAINER_ID", "")
	if got := containerID(); got != "pid 77" {
		t.Errorf("without CRYO_CONTAINER_ID: %q, want pid 77", got)
	}
	t.Setenv("CRYO_CONTAINER_ID", "ctr-1")
	if got := containerID(); got != "ctr-1" {
		t.Errorf("with CRYO_CONTAINER_ID: %q", got)
	}
}

// CRTOOLS_IMAGE_DIR is a /proc/<criu>/fd/<n> link that dies with CRIU's
// descriptor: the action resolves it, and a later action of the same CRIU
// whose variable no longer resolves (post-resume, after CRIU closed the
// directory) gets the path remembered. The log goes there too.
func TestImageDirRemembered(t *testing.T) {
	useMarkers(t)
	images := t.TempDir()
	d, err := os.Open(images)
	if err != nil {
		t.Fatal(err)
	}
	link := "/proc/self/fd/" + strconv.Itoa(int(d.Fd()))
	t.Setenv("CRTOOLS_IMAGE_DIR", link)
	t.Setenv("CRYO_CONTAINER_ID", "ctr-2")
	got, err := imageDir()
	if err != nil || got != images {
		t.Fatalf("imageDir through %s: %q, %v; want %s", link, got, err, images)
	}
	d.Close()
	if got, err := imageDir(); err != nil || got != images {
		t.Fatalf("after the descriptor closed: %q, %v; want the remembered %s", got, err, images)
	}
	logf("%s: %s", "post-resume", "resumed")
	data, err := os.ReadFile(filepath.Join(images, "cryo-action.log"))
	if err != nil || !strings.Contains(string(data), "cryo-criu-action: container ctr-2: post-resume: resumed") {
		t.Fatalf("cryo-action.log: %q, %v", data, err)
	}
	if fi, _ := os.Stat(filepath.Join(images, "cryo-action.log")); fi.Mode().Perm() != 0o600 {
		t.Errorf("cryo-action.log mode %v, want 0600", fi.Mode().Perm())
	}
	t.Setenv("CRTOOLS_IMAGE_DIR", "")
	markerDir = t.TempDir() // another CRIU's: nothing remembered
	if got, err := imageDir(); err == nil {
		t.Fatalf("no CRTOOLS_IMAGE_DIR and nothing remembered: %q, want an error", got)
	}
}

// A watcher's log, with no image directory in its environment, goes to
// CRYO_WATCH_DIR.
func TestLogToWatchDir(t *testing.T) {
	useMarkers(t)
	watch := t.TempDir()
	t.Setenv("CRTOOLS_IMAGE_DIR", "")
	t.Setenv("CRYO_WATCH_DIR", watch)
	t.Setenv("CRYO_CONTAINER_ID", "ctr-3")
	logf("%s: %v", WatcherName, "CUDA resumed")
	data, err := os.ReadFile(filepath.Join(watch, "cryo-action.log"))
	if err != nil || !strings.Contains(string(data), "container ctr-3: cryo-resume-watch: CUDA resumed") {
		t.Fatalf("watch dir log: %q, %v", data, err)
	}
}

// useMarkers points markerDir at a directory of the test's.
func useMarkers(t *testing.T) {
	old := markerDir
	markerDir = t.TempDir()
	t.Cleanup(func() { markerDir = old })
}

// The pre-resume check that cannot read the spec it checks against
// cannot vouch for the restored tasks: it writes a failed verdict into
// the bundle and kills them (here a real child standing for the restored
// root), and a second run for the same CRIU (CRIU 4.1 registers the
// script twice) does nothing.
func TestVerifyWithoutSpecKills(t *testing.T) {
	useMarkers(t)
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	t.Cleanup(func() { _ = child.Process.Kill(); <-done })
	t.Setenv("CRTOOLS_INIT_PID", strconv.Itoa(child.Process.Pid))
	t.Setenv("CRYO_CONTAINER_ID", "ctr-4")
	t.Setenv("CRTOOLS_IMAGE_DIR", "")
	bundle := t.TempDir() // no config.json
	if code := verify(bundle); code != 1 {
		t.Fatalf("verify without a spec: exit %d, want 1", code)
	}
	select {
	case <-done:
		done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the restored task still runs after a failed check")
	}
	v, ok := outcome.ReadVerdict(bundle)
	if !ok || v.Passed || !v.Killed || !strings.Contains(v.Error, "read the spec") || v.Tasks != 1 {
		t.Fatalf("verdict %+v (found %v); want failed, killed, 1 task, the spec unread", v, ok)
	}
	if code := verify(bundle); code != 0 {
		t.Errorf("a second pre-resume of the same CRIU: exit %d, want 0 (once per CRIU)", code)
	}
}
