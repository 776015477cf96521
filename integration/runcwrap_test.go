package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// rwFakeRuncScript stands in for runc: it records every command line (one
// line per call, arguments separated by \x1f) in $FAKE_RUNC_LOG, answers
// `state` and `ps` for the container pid $FAKE_RUNC_PID, writes a CRIU
// inventory on `checkpoint`, and exits with $FAKE_RUNC_EXIT.
const rwFakeRuncScript = `#!/bin/sh
{ for a in "$@"; do printf '%s\037' "$a"; done; echo; } >> "$FAKE_RUNC_LOG"
prev=
for a in "$@"; do
	case "$a" in
	state) echo '{"status":"running"}'; exit 0 ;;
	ps) echo "[$FAKE_RUNC_PID]"; exit 0 ;;
	esac
	[ "$prev" = --image-path ] && mkdir -p "$a" && echo inv > "$a/inventory.img"
	prev=$a
done
echo "fake runc says hello"
exit "${FAKE_RUNC_EXIT:-0}"
`

// rwFakeRunc writes the script and returns the environment that makes
// cryo-runc use it, and a function reading the recorded command lines.
func rwFakeRunc(t *testing.T, exit int) ([]string, func() [][]string) {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "runc")
	if err := os.WriteFile(script, []byte(rwFakeRuncScript), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "calls")
	env := []string{"CRYO_RUNC=" + script, "FAKE_RUNC_LOG=" + log, "FAKE_RUNC_EXIT=" + strconv.Itoa(exit), "CRYO_RUNC_ENV=/dev/null"}
	return env, func() [][]string {
		data, _ := os.ReadFile(log)
		var calls [][]string
		for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			if line != "" {
				calls = append(calls, strings.Split(strings.TrimSuffix(line, "\x1f"), "\x1f"))
			}
		}
		return calls
	}
}

// Every command but checkpoint and restore reaches runc exactly as given,
// unknown flags included, with runc's output and exit status.
func TestRuncwrapPassesThroughUntouched(t *testing.T) {
	runcw := cryoBin(t, "cryo-runc")
	env, calls := rwFakeRunc(t, 42)
	lines := [][]string{
		{"--root", "/run/x", "--made-up-global", "list", "--weird-flag", "-q"},
		{"--log", "/tmp/l", "--log-format", "json", "--systemd-cgroup", "--debug", "create", "--bundle", "/b", "--new-flag=1", "--console-socket", "/s", "ctr"},
		{"exec", "--tty", "ctr", "sh", "-c", "echo '1 2'"},
		{"--version"},
	}
	for _, args := range lines {
		out, err := runErr(10*time.Second, env, runcw, args...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 42 {
			t.Fatalf("cryo-runc %q: want runc's exit status 42, got %v\n%s", args, err, out)
		}
		if !strings.Contains(out, "fake runc says hello") {
			t.Fatalf("runc's stdout lost: %q", out)
		}
	}
	// --cryo-env is cryo-runc's own and never reaches runc.
	runErr(10*time.Second, env, runcw, "--cryo-env=/dev/null", "--root", "/r", "kill", "ctr", "9")
	lines = append(lines, []string{"--root", "/r", "kill", "ctr", "9"})
	if got := calls(); !reflect.DeepEqual(got, lines) {
		t.Fatalf("runc saw\n%q\nwant\n%q", got, lines)
	}
}

// checkpoint runs the orchestration and passes runc's checkpoint flags,
// unknown ones included, untouched; the manifest lands in --image-path.
func TestRuncwrapCheckpointPassesFlags(t *testing.T) {
	runcw := cryoBin(t, "cryo-runc")
	env, calls := rwFakeRunc(t, 0)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	env = append(env, "FAKE_RUNC_PID="+strconv.Itoa(sleeper.Process.Pid))
	env = append(env, fakeDriverEnv(t, "")...)
	img := filepath.Join(t.TempDir(), "img")
	args := []string{"--root", "/r", "checkpoint", "--image-path", img, "--work-path", "/w", "--brand-new-flag", "--manage-cgroups-mode", "soft", "--leave-running", "ctr"}
	out := run(t, 30*time.Second, env, runcw, args...)
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
	run(t, 10*time.Second, []string{"CRYO_RUNC=/usr/sbin/runc", "CRYO_RUNC_ENV=/dev/null"}, cryoBin(t, "cryo-runc"), "checkpoint", "--help")
}

// rwCraftCheckpoint writes a CRIU-looking image directory whose manifest says
// one CUDA process ran on an H100 holding 8 GiB, with good digests.
func rwCraftCheckpoint(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "checkpoint")
	os.MkdirAll(dir, 0o755)
	for name, data := range map[string]string{"inventory.img": "inventory", "pages-1.img": strings.Repeat("page", 1024), "files.img": "libcuda.so.1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := manifest.New("crafted")
	m.Processes = []manifest.Process{{PID: 1, State: "running"}}
	m.Inventory = cuda.Inventory{DriverVersion: "580.159.04", CUDAVersion: 13000, GPUs: []cuda.GPU{{
		Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-0b1c2d3e-0000-4000-8000-000000000001",
		MemoryTotal: 80 << 30, MemoryFree: 72 << 30, ComputeCapability: "9.0"}}}
	// The needs of a manifest before version 3: every GPU, with the memory in use on it.
	m.Needs = []manifest.GPUNeed{{UUID: "GPU-0b1c2d3e-0000-4000-8000-000000000001", Name: "NVIDIA H100 80GB HBM3", ComputeCapability: "9.0", Memory: 8 << 30}}
	var err error
	if m.Digests, err = digest.Files(dir); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rwRestoreRefused runs `cryo-runc restore` on dir and checks that it failed
// with every one of want in its message and never called runc restore.
func rwRestoreRefused(t *testing.T, dir string, extraEnv []string, want ...string) {
	t.Helper()
	env, calls := rwFakeRunc(t, 0)
	env = append(append(env, fakeDriverEnv(t, "")...), extraEnv...)
	out, err := runErr(30*time.Second, env, cryoBin(t, "cryo-runc"),
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
	dir := rwCraftCheckpoint(t)
	a100 := "CRYO_FAKE_GPUS=NVIDIA A100-SXM4-40GB|GPU-aaaaaaaa-0000-4000-8000-000000000001|42949672960|8.0"
	rwRestoreRefused(t, dir, []string{a100},
		"restore of ctr failed at step verify", "restore needs 1× NVIDIA H100 80GB HBM3 (sm_90)", "A100", "nothing was restored")
}

// A flipped byte in an image file fails the digest check before runc runs.
func TestRuncwrapRestoreRefusesCorruptImage(t *testing.T) {
	dir := rwCraftCheckpoint(t)
	flipByte(t, filepath.Join(dir, "pages-1.img"))
	rwRestoreRefused(t, dir, nil, "pages-1.img", "corrupt", "sha256 mismatch", "nothing was restored")
}

// rwBundle writes an OCI bundle running fakecuda-app (runc spec, edited),
// given GPU 0's stand-in node (giveStandIns).
func rwBundle(t *testing.T, dir string) string {
	t.Helper()
	newRootfs(t, dir)
	run(t, 10*time.Second, nil, "/usr/sbin/runc", "spec", "--bundle", dir)
	path := filepath.Join(dir, "config.json")
	data, _ := os.ReadFile(path)
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Process.Terminal = false
	spec.Process.Args = []string{"/bin/fakecuda-app", "100"}
	giveStandIns(&spec, 0)
	data, _ = json.Marshal(&spec)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rwRunDetached runs a runc-like command whose container writes to a fresh
// pipe (CRIU can dump pipes, not host files), returning what the container
// prints.
func rwRunDetached(t *testing.T, env []string, name string, args ...string) *testsupport.Buffer {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, w, w
	out := &testsupport.Buffer{}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			out.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	err = cmd.Run()
	w.Close()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return out
}

func rwLastTick(s string) int {
	n := -1
	for _, m := range regexp.MustCompile(`tick (\d+) state=running sum=OK`).FindAllStringSubmatch(s, -1) {
		n, _ = strconv.Atoi(m[1])
	}
	return n
}

// A container created through cryo-runc with CRYO_CRIU_HOOKS=1 survives a
// direct `runc checkpoint` and `runc restore` (no cryo-runc involved): the
// CRIU action script suspends CUDA before the dump and resumes it after the
// restore, and the app continues its count.
func TestRuncwrapHooksDirectRunc(t *testing.T) {
	requireRoot(t)
	r := rwStart(t, "cryo-hooks", "CRYO_CRIU_HOOKS=1")
	dir, bundle, root, id, out := r.dir, r.bundle, r.root, r.id, r.out
	img := filepath.Join(dir, "img")
	run(t, time.Minute, nil, "/usr/sbin/runc", "--root", root, "checkpoint", "--image-path", img, "--work-path", filepath.Join(dir, "w1"), id)
	before := rwLastTick(out.String())
	m, err := manifest.Read(img)
	if err != nil || len(m.Processes) != 1 || m.Digests == nil {
		t.Fatalf("direct checkpoint manifest %+v: %v", m, err)
	}

	out2 := rwRunDetached(t, nil, "/usr/sbin/runc", "--root", root, "restore", "-d", "--image-path", img, "--work-path", filepath.Join(dir, "w2"), "--bundle", bundle, id)
	deadline := time.Now().Add(20 * time.Second)
	for rwLastTick(out2.String()) <= before+2 {
		if time.Now().After(deadline) {
			action, _ := os.ReadFile(filepath.Join(img, "cryo-action.log"))
			state, _ := runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", root, "state", id)
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
	requireRoot(t)
	stock := "/usr/local/libexec/cryo/criu-stock"
	if _, err := os.Stat(stock); err != nil {
		t.Fatalf("%s missing (%v): run `make deps`", stock, err)
	}
	r := rwStart(t, "cryo-stockcriu", "CRYO_CRIU="+stock)
	msg, err := runErr(time.Minute, nil, cryoBin(t, "cryo-runc"), "--cryo-env", r.envFile, "--root", r.root, "checkpoint", "--image-path", filepath.Join(r.dir, "img"), r.id)
	if err == nil {
		t.Fatalf("checkpoint with a stock CRIU succeeded:\n%s", msg)
	}
	for _, want := range []string{"cryo_seize_stopped", "install cryo's CRIU"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("refusal does not say %q:\n%s", want, msg)
		}
	}
	before := rwLastTick(r.out.String())
	waitFor(t, 10*time.Second, "the app to tick on", func() bool { return rwLastTick(r.out.String()) > before+2 })
}

// rwRun is fakecuda-app in a container run by cryo-runc (rwStart).
type rwRun struct {
	dir, bundle, envFile, root, id string
	out                            *testsupport.Buffer
}

// rwStart runs fakecuda-app in a container through cryo-runc, whose
// environment file has the real runc, the fake driver and lines, and waits
// for its first ticks. The container is deleted at the end of the test.
func rwStart(t *testing.T, name string, lines ...string) rwRun {
	t.Helper()
	r := rwRun{dir: t.TempDir(), id: name + "-" + strconv.Itoa(os.Getpid())}
	r.bundle = rwBundle(t, filepath.Join(r.dir, "bundle"))
	r.envFile, r.root = filepath.Join(r.dir, "cryo-runc.env"), filepath.Join(r.dir, "runc-root")
	all := append(append([]string{"CRYO_RUNC=/usr/sbin/runc"}, lines...), fakeDriverEnv(t, "")...)
	if err := os.WriteFile(r.envFile, []byte(strings.Join(all, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", r.root, "delete", "-f", r.id) })
	r.out = rwRunDetached(t, nil, cryoBin(t, "cryo-runc"), "--cryo-env", r.envFile, "--root", r.root, "run", "-d", "--bundle", r.bundle, r.id)
	waitFor(t, 20*time.Second, "the app to tick", func() bool { return rwLastTick(r.out.String()) >= 3 })
	return r
}
