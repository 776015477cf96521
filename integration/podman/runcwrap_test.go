package podman

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// Every command but checkpoint and restore reaches runc exactly as given,
// unknown flags included, with runc's output and exit status.
func TestRuncwrapPassesThroughUntouched(t *testing.T) {
	runcw := harness.CryoBin(t, "cryo-runc")
	env, calls := harness.RwFakeRunc(t, 42)
	lines := [][]string{
		{"--root", "/run/x", "--made-up-global", "list", "--weird-flag", "-q"},
		{"--log", "/tmp/l", "--log-format", "json", "--systemd-cgroup", "--debug", "create", "--bundle", "/b", "--new-flag=1", "--console-socket", "/s", "ctr"},
		{"exec", "--tty", "ctr", "sh", "-c", "echo '1 2'"},
		{"--version"},
	}
	for _, args := range lines {
		out, err := harness.RunErr(10*time.Second, env, runcw, args...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 42 {
			t.Fatalf("cryo-runc %q: want runc's exit status 42, got %v\n%s", args, err, out)
		}
		if !strings.Contains(out, "fake runc says hello") {
			t.Fatalf("runc's stdout lost: %q", out)
		}
	}
	// --cryo-env is cryo-runc's own and never reaches runc.
	harness.RunErr(10*time.Second, env, runcw, "--cryo-env=/dev/null", "--root", "/r", "kill", "ctr", "9")
	lines = append(lines, []string{"--root", "/r", "kill", "ctr", "9"})
	if got := calls(); !reflect.DeepEqual(got, lines) {
		t.Fatalf("runc saw\n%q\nwant\n%q", got, lines)
	}
}

// checkpoint runs the orchestration and passes runc's checkpoint flags,
// unknown ones included, untouched; the manifest lands in --image-path.
func TestRuncwrapCheckpointPassesFlags(t *testing.T) {
	runcw := harness.CryoBin(t, "cryo-runc")
	env, calls := harness.RwFakeRunc(t, 0)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	env = append(env, "FAKE_RUNC_PID="+strconv.Itoa(sleeper.Process.Pid))
	env = append(env, harness.FakeDriverEnv(t, "")...)
	img := filepath.Join(t.TempDir(), "img")
	args := []string{"--root", "/r", "checkpoint", "--image-path", img, "--work-path", "/w", "--brand-new-flag", "--manage-cgroups-mode", "soft", "--leave-running", "ctr"}
	out := harness.Run(t, 30*time.Second, env, runcw, args...)
	var dump []string
	for _, c := range calls() {
		if len(c) > 2 && c[2] == "checkpoint" {
			dump = c
		}
	}
	if !reflect.DeepEqual(dump, args) {
		t.Fatalf("runc checkpoint saw %q, want %q\n%s", dump, args, out)
	}
	m, err := manifest.Read(img)
	if err != nil {
		t.Fatalf("no manifest in the image path: %v\n%s", err, out)
	}
	if m.ContainerID != "ctr" || m.Digests == nil {
		t.Fatalf("manifest %+v", m)
	}
}

// Podman decides whether a runtime can checkpoint from this exit status.
func TestRuncwrapCheckpointHelp(t *testing.T) {
	harness.Run(t, 10*time.Second, []string{"CRYO_RUNC=/usr/sbin/runc", "CRYO_RUNC_ENV=/dev/null"}, harness.CryoBin(t, "cryo-runc"), "checkpoint", "--help")
}

// rwRestoreRefused runs `cryo-runc restore` on dir and checks that it failed
// with every one of want in its message and never called runc restore.
func rwRestoreRefused(t *testing.T, dir string, extraEnv []string, want ...string) {
	t.Helper()
	env, calls := harness.RwFakeRunc(t, 0)
	env = append(append(env, harness.FakeDriverEnv(t, "")...), extraEnv...)
	out, err := harness.RunErr(30*time.Second, env, harness.CryoBin(t, "cryo-runc"),
		"restore", "--detach", "--image-path", dir, "--work-path", filepath.Dir(dir), "--bundle", "/nonexistent", "ctr")
	if err == nil {
		t.Fatalf("restore succeeded:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("message lacks %q:\n%s", w, out)
		}
	}
	for _, c := range calls() {
		for _, a := range c {
			if a == "restore" {
				t.Fatalf("runc restore was called: %q", c)
			}
		}
	}
}

// A checkpoint that needs a GPU this host lacks is refused before runc
// restore is called, saying what it needs and what the host offers.
func TestRuncwrapRestoreRefusesWrongGPU(t *testing.T) {
	dir := harness.RwCraftCheckpoint(t)
	a100 := "CRYO_FAKE_GPUS=NVIDIA A100-SXM4-40GB|GPU-aaaaaaaa-0000-4000-8000-000000000001|42949672960|8.0"
	rwRestoreRefused(t, dir, []string{a100},
		"restore of ctr failed at step verify", "restore needs 1× NVIDIA H100 80GB HBM3 (sm_90)", "A100", "nothing was restored")
}

// A flipped byte in an image file fails the digest check before runc runs.
func TestRuncwrapRestoreRefusesCorruptImage(t *testing.T) {
	dir := harness.RwCraftCheckpoint(t)
	harness.FlipByte(t, filepath.Join(dir, "pages-1.img"))
	rwRestoreRefused(t, dir, nil, "pages-1.img", "corrupt", "sha256 mismatch", "nothing was restored")
}

// A container created through cryo-runc with CRYO_CRIU_HOOKS=1 survives a
// direct `runc checkpoint` and `runc restore` (no cryo-runc involved): the
// CRIU action script suspends CUDA before the dump and resumes it after the
// restore, and the app continues its count.
func TestRuncwrapHooksDirectRunc(t *testing.T) {
	harness.RequireRoot(t)
	r := harness.RwStart(t, "cryo-hooks", "CRYO_CRIU_HOOKS=1")
	dir, bundle, root, id, out := r.Dir, r.Bundle, r.Root, r.ID, r.Out
	img := filepath.Join(dir, "img")
	harness.Run(t, time.Minute, nil, "/usr/sbin/runc", "--root", root, "checkpoint", "--image-path", img, "--work-path", filepath.Join(dir, "w1"), id)
	before := harness.RwLastTick(out.String())
	m, err := manifest.Read(img)
	if err != nil || len(m.Processes) != 1 || m.Digests == nil {
		t.Fatalf("direct checkpoint manifest %+v: %v", m, err)
	}

	out2 := harness.RwRunDetached(t, nil, "/usr/sbin/runc", "--root", root, "restore", "-d", "--image-path", img, "--work-path", filepath.Join(dir, "w2"), "--bundle", bundle, id)
	deadline := time.Now().Add(20 * time.Second)
	for harness.RwLastTick(out2.String()) <= before+2 {
		if time.Now().After(deadline) {
			action, _ := os.ReadFile(filepath.Join(img, "cryo-action.log"))
			state, _ := harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "state", id)
			restoreLog, _ := os.ReadFile(filepath.Join(dir, "w2", "restore.log"))
			var scripts []string
			for _, l := range strings.Split(string(restoreLog), "\n") {
				if strings.Contains(l, "script") || strings.Contains(l, "Error") || strings.Contains(l, "inherit") {
					scripts = append(scripts, l)
				}
			}
			t.Fatalf("restored app does not tick on (before: tick %d)\nrestored output: %s\nold output tail: %.300s\naction log: %s\nstate: %s\nrestore.log: %s", before, out2, out.String()[max(0, len(out.String())-300):], action, state, strings.Join(scripts, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if first := regexp.MustCompile(`tick (\d+)`).FindStringSubmatch(out2.String()); first == nil || first[1] == "0" {
		t.Fatalf("restored app restarted: %s", out2)
	}
	// The hooks' script carries the bundle: a direct runc restore gets the
	// check of the restored tasks too.
	if v, err := os.ReadFile(filepath.Join(bundle, "cryo-outcome.json")); err != nil || !strings.Contains(string(v), `"passed":true`) {
		t.Errorf("no passed check of the restored tasks: %s %v", v, err)
	}
}

// A container checkpoint of CUDA processes with a CRIU that lacks cryo's
// patch 0003 (the stock build, as CRYO_CRIU) is refused before anything is
// suspended: runc's dump would freeze the container and wait for ever on
// its held, stopped threads. The app runs on, never stopped.
func TestRuncwrapRefusesCRIUWithoutSeizeStopped(t *testing.T) {
	harness.RequireRoot(t)
	stock := "/usr/local/libexec/cryo/criu-stock"
	if _, err := os.Stat(stock); err != nil {
		t.Fatalf("%s missing (%v): run `make deps`", stock, err)
	}
	r := harness.RwStart(t, "cryo-stockcriu", "CRYO_CRIU="+stock)
	msg, err := harness.RunErr(time.Minute, nil, harness.CryoBin(t, "cryo-runc"), "--cryo-env", r.EnvFile, "--root", r.Root, "checkpoint", "--image-path", filepath.Join(r.Dir, "img"), r.ID)
	if err == nil {
		t.Fatalf("checkpoint with a stock CRIU succeeded:\n%s", msg)
	}
	for _, want := range []string{"cryo_seize_stopped", "install cryo's CRIU"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("refusal does not say %q:\n%s", want, msg)
		}
	}
	before := harness.RwLastTick(r.Out.String())
	harness.WaitFor(t, 10*time.Second, "the app to tick on", func() bool { return harness.RwLastTick(r.Out.String()) > before+2 })
}
