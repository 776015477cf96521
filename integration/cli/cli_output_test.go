package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// holdLock takes cryo's lock of key in lockDir as a run of op on target
// does (the file, the flock, the holder's line), until the test ends.
func holdLock(t *testing.T, lockDir, key, op, target string) func() {
	t.Helper()
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(lockDir, key+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "%d %s of %s\n", os.Getpid(), op, target)
	release := func() { f.Close() }
	t.Cleanup(release)
	return release
}

type cudaStateJSON struct {
	PID          int    `json:"pid"`
	State        string `json:"state"`
	Frozen       bool   `json:"frozen"`
	Operation    string `json:"operation"`
	OperationPID int    `json:"operation_pid"`
	Error        string `json:"error"`
}

// cudaStateOf runs `cryo cuda state --json PID`, which must answer at once.
func cudaStateOf(t *testing.T, env []string, pid int) (cudaStateJSON, string) {
	t.Helper()
	start := time.Now()
	stdout, stderr, code := harness.CryoSplit(t, env, "cuda", "state", "--json", strconv.Itoa(pid))
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cuda state took %s", d)
	}
	var st []cudaStateJSON
	wantJSON(t, "cuda state --json", stdout, &st)
	if code != 0 || len(st) != 1 {
		t.Fatalf("cuda state: exit %d, %+v\n%s", code, st, stderr)
	}
	return st[0], stderr
}

// A CUDA process in a frozen cgroup (a paused container) is "frozen" at
// once, without the driver's 30 s hang; while a checkpoint holds its lock
// the message says so instead of suggesting `cryo cuda resume`.
func TestCLICudaStateFrozen(t *testing.T) {
	harness.RequireRoot(t)
	env, lockDir := psEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	fz := harness.NewFreezer(t, "cryo-state-test-"+strconv.Itoa(os.Getpid()), p.PID)
	fz.Set(t, true)

	release := holdLock(t, lockDir, "pid-"+strconv.Itoa(p.PID), "checkpoint", "pid "+strconv.Itoa(p.PID))
	st, stderr := cudaStateOf(t, env, p.PID)
	if st.State != "frozen" || !st.Frozen || st.Operation != "checkpoint" || st.OperationPID != os.Getpid() {
		t.Fatalf("frozen, locked by a checkpoint: %+v", st)
	}
	harness.WantIn(t, stderr, "checkpoint of it is in progress", "cryo pid "+strconv.Itoa(os.Getpid()))
	if strings.Contains(stderr, "cuda resume") {
		t.Fatalf("suggests cuda resume under a checkpoint:\n%s", stderr)
	}

	release()
	st, stderr = cudaStateOf(t, env, p.PID)
	if st.State != "frozen" || st.Operation != "" {
		t.Fatalf("frozen, no lock: %+v", st)
	}
	harness.WantIn(t, stderr, "is frozen", "remedy: resume the container")
	text, _, code := harness.CryoSplit(t, env, "cuda", "state", strconv.Itoa(p.PID))
	if code != 0 || strings.TrimSpace(text) != strconv.Itoa(p.PID)+"\tfrozen" {
		t.Fatalf("cuda state text: exit %d %q", code, text)
	}

	fz.Set(t, false)
	if st, _ = cudaStateOf(t, env, p.PID); st.State != "running" || st.Frozen {
		t.Fatalf("after the thaw: %+v", st)
	}
}

// cuda suspend|resume --json print one document per call (pid, states
// before and after, bytes, seconds), -q the pids alone; checkpoint -q
// prints the image directory alone; image build|push|pull|rm --json print
// the image (ref, digest, size) with nothing else on stdout.
func TestCLIResultOutputs(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	pid := strconv.Itoa(p.PID)
	var set []struct {
		PID     int     `json:"pid"`
		Before  string  `json:"state_before"`
		After   string  `json:"state_after"`
		Bytes   uint64  `json:"bytes"`
		Seconds float64 `json:"seconds"`
		Error   string  `json:"error"`
	}
	stdout, stderr, code := harness.CryoSplit(t, env, "cuda", "suspend", "--json", pid)
	wantJSON(t, "cuda suspend --json", stdout, &set)
	if code != 0 || len(set) != 1 || set[0].PID != p.PID || set[0].Before != "running" || set[0].After != "checkpointed" || set[0].Bytes != 1<<20 || set[0].Seconds <= 0 || set[0].Error != "" {
		t.Fatalf("cuda suspend --json: exit %d %+v\n%s", code, set, stderr)
	}
	stdout, stderr, code = harness.CryoSplit(t, env, "cuda", "resume", "-q", pid)
	if code != 0 || stdout != pid+"\n" {
		t.Fatalf("cuda resume -q: exit %d stdout %q\n%s", code, stdout, stderr)
	}
	// --format json is --json.
	stdout, _, _ = harness.CryoSplit(t, env, "cuda", "suspend", "--format", "json", pid)
	wantJSON(t, "cuda suspend --format json", stdout, &set)
	stdout, stderr, code = harness.CryoSplit(t, env, "cuda", "resume", "--json", pid)
	wantJSON(t, "cuda resume --json", stdout, &set)
	if code != 0 || set[0].Before != "checkpointed" || set[0].After != "running" || set[0].Bytes != 1<<20 {
		t.Fatalf("cuda resume --json: exit %d %+v\n%s", code, set, stderr)
	}

	img := filepath.Join(t.TempDir(), "img")
	stdout, stderr, code = harness.CryoSplit(t, env, "checkpoint", "-q", "--pid", pid, "--dir", img)
	if code != 0 || stdout != img+"\n" || stderr != "" {
		t.Fatalf("checkpoint -q: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	killDumped(t, p)

	store := filepath.Join(t.TempDir(), "store")
	ref := "localhost:5999/cli/output:v1"
	var im struct {
		Ref    string `json:"ref"`
		Digest string `json:"digest"`
		Size   int64  `json:"size"`
		Layers int    `json:"layers"`
		Kind   string `json:"kind"`
	}
	stdout, stderr, code = harness.CryoSplit(t, env, "image", "build", "--json", img, ref, "--store", store)
	wantJSON(t, "image build --json", stdout, &im)
	if code != 0 || im.Ref != ref || !strings.HasPrefix(im.Digest, "sha256:") || im.Size == 0 || im.Layers == 0 || im.Kind != "process" {
		t.Fatalf("image build --json: exit %d %+v\n%s", code, im, stderr)
	}
	var rm []struct{ Ref, Digest string }
	stdout, stderr, code = harness.CryoSplit(t, env, "image", "rm", "--json", ref, "--store", store)
	wantJSON(t, "image rm --json", stdout, &rm)
	if code != 0 || len(rm) != 1 || rm[0].Ref != ref || rm[0].Digest != im.Digest {
		t.Fatalf("image rm --json: exit %d %+v\n%s", code, rm, stderr)
	}
	stdout, _, code = harness.CryoSplit(t, env, "image", "rm", "--json", ref, "--store", store)
	wantJSON(t, "image rm --json of a missing ref", stdout, &rm)
	if code != 1 || len(rm) != 0 {
		t.Fatalf("image rm --json of a missing ref: exit %d %+v", code, rm)
	}
}

// An existing empty --dir of another user becomes root's and 0700, so that
// user cannot replace the manifest or the images afterwards.
func TestCLICheckpointTakesDir(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	parent := t.TempDir()
	dir := filepath.Join(parent, "theirs")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := harness.CryoSplit(t, env, "checkpoint", "-q", "--leave-running", "--pid", strconv.Itoa(p.PID), "--dir", dir)
	if code != 0 || stdout != dir+"\n" {
		t.Fatalf("checkpoint into another user's empty dir: exit %d %q\n%s", code, stdout, stderr)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Mode&0o777 != 0o700 {
		t.Fatalf("--dir after the checkpoint: uid %d mode %o, want 0 and 700", st.Uid, st.Mode&0o777)
	}
	// A symlink as --dir is refused before any process is touched.
	link := filepath.Join(parent, "link")
	os.Symlink(t.TempDir(), link)
	_, stderr, code = harness.CryoSplit(t, env, "checkpoint", "--leave-running", "--pid", strconv.Itoa(p.PID), "--dir", link)
	if code == 0 || !strings.Contains(stderr, "not a symlink") {
		t.Fatalf("checkpoint --dir SYMLINK: exit %d\n%s", code, stderr)
	}
	p.WaitTicks(t, p.LastTick(t)+2)
}

// An encrypted build leaves no temporary blob, and opening the store
// removes one a killed build left (its writer's pid is in its name).
func TestCLIImageBuildEncTemps(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	pub, _ := writeKeyPair(t, t.TempDir(), "k")
	store := filepath.Join(t.TempDir(), "store")
	harness.BareCryo(t, env, "image", "build", "-q", "--encryption-key", "jwe:"+pub, img, "localhost:5999/cli/enc:v1", "--store", store)
	blobs := filepath.Join(store, "blobs", "sha256")
	if left, _ := filepath.Glob(filepath.Join(blobs, ".enc-*")); len(left) != 0 {
		t.Fatalf("temporary blobs after a build: %v", left)
	}

	dead := exec.Command("true") // a writer that is gone
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(blobs, ".enc-"+strconv.Itoa(dead.Process.Pid)+"-123")
	own := filepath.Join(blobs, ".enc-"+strconv.Itoa(os.Getpid())+"-456")
	for _, f := range []string{stale, own} {
		if err := os.WriteFile(f, []byte("ciphertext"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	harness.BareCryo(t, env, "image", "ls", "--store", store)
	if _, err := os.Stat(stale); err == nil {
		t.Fatal("the stale temporary blob of a dead build is still there")
	}
	if _, err := os.Stat(own); err != nil {
		t.Fatalf("a live writer's temporary blob was removed: %v", err)
	}
}

// Shell completion offers the CUDA processes' pids (with their commands),
// the store's references and --format's values, as cobra's __complete
// (what every shell's script calls) prints them.
func TestCLIDynamicCompletion(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	pid := strconv.Itoa(p.PID)
	for _, args := range [][]string{{"cuda", "suspend", ""}, {"cuda", "state", ""}, {"checkpoint", "--pid", ""}} {
		out, _, code := harness.CryoSplit(t, env, append([]string{"__complete"}, args...)...)
		if code != 0 || !strings.Contains(out, pid+"\tfakecuda-app\n") {
			t.Fatalf("complete %v: exit %d, no pid %s:\n%s", args, code, pid, out)
		}
	}
	if out, _, _ := harness.CryoSplit(t, env, "__complete", "cuda", "resume", pid, ""); strings.Contains(out, pid+"\t") {
		t.Fatalf("a pid already given is offered again:\n%s", out)
	}

	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--leave-running", "--pid", pid, "--dir", img)
	store := filepath.Join(t.TempDir(), "store")
	ref := "localhost:5999/cli/complete:v1"
	harness.BareCryo(t, env, "image", "build", "-q", img, ref, "--store", store)
	for _, cmd := range []string{"rm", "push", "restore", "export"} {
		out, _, code := harness.CryoSplit(t, env, "__complete", "image", cmd, "--store", store, "")
		if code != 0 || !strings.Contains(out, ref+"\n") {
			t.Fatalf("complete image %s: exit %d, no %s:\n%s", cmd, code, ref, out)
		}
	}
	out, _, _ := harness.CryoSplit(t, env, "__complete", "inspect", "--store", store, "")
	harness.WantIn(t, out, ref)
	out, _, _ = harness.CryoSplit(t, env, "__complete", "image", "ls", "--format", "")
	harness.WantIn(t, out, "json\t", "text\t")
}

// A checkpoint's result is its directory, on stdout with or without -q,
// and --print-stats's table follows it there; the message that says what
// was written goes to stderr.
func TestCLICheckpointStdout(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	stdout, stderr, code := harness.CryoSplit(t, env, "checkpoint", "--leave-running", "--print-stats", "--pid", strconv.Itoa(p.PID), "--dir", img)
	if code != 0 || !strings.HasPrefix(stdout, img+"\n") || len(stdout) == len(img)+1 {
		t.Fatalf("checkpoint --print-stats: exit %d, stdout %q, want the directory then the stats\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "written to "+img) || strings.Contains(stdout, "written to") {
		t.Fatalf("checkpoint: stderr %q, stdout %q", stderr, stdout)
	}
	p.WaitTicks(t, p.LastTick(t)+2)
}

// `cryo cuda resume $(cryo ps -q)` names every CUDA process; only the
// suspended ones are resumed and counted, the running one is skipped with
// its state, and a resume with none suspended does nothing and exits 0.
func TestCLIResumeOnlySuspended(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	a, b := harness.BareStartFakeApp(t, env, nil), harness.BareStartFakeApp(t, env, nil)
	pa, pb := strconv.Itoa(a.PID), strconv.Itoa(b.PID)
	if _, stderr, code := harness.CryoSplit(t, env, "cuda", "suspend", pa); code != 0 {
		t.Fatalf("cuda suspend %s: exit %d\n%s", pa, code, stderr)
	}
	stdout, stderr, code := harness.CryoSplit(t, env, "cuda", "resume", pa, pb)
	if code != 0 || !strings.Contains(stderr, "resumed 1 process in") || !strings.Contains(stderr, "skipping pid "+pb+": running, not suspended") {
		t.Fatalf("cuda resume of one suspended and one running: exit %d, stdout %q\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = harness.CryoSplit(t, env, "cuda", "resume", "-q", pa, pb)
	if code != 0 || stdout != "" || !strings.Contains(stderr, "skipping pid") {
		t.Fatalf("cuda resume -q with none suspended: exit %d, stdout %q\n%s", code, stdout, stderr)
	}
	a.WaitTicks(t, a.LastTick(t)+2)
	b.WaitTicks(t, b.LastTick(t)+2)
}
