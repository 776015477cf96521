package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// wantJSON fails unless s is one JSON document, decoded into v.
func wantJSON(t *testing.T, what, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%s: stdout is not JSON: %v\n%s", what, err, s)
	}
}

// TestCLIUsageExitCodes: bad usage exits 2 with one line naming the problem
// and the help to read, not the whole help; nothing is done.
func TestCLIUsageExitCodes(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"chekpoint"},
		{"checkpoint", "--no-such-flag"},
		{"checkpoint", "--pid", "x", "--dir", "/tmp/x"},
		{"checkpoint"},
		{"inspect"},
		{"inspect", "a", "b"},
		{"image", "build", "onlyone"},
		{"image", "ls", "--format", "yaml"},
		{"cuda", "state"},
		{"cuda", "state", "notapid"},
		{"restore", "--dir", "/x", "--image", "y"},
		{"version", "extra"},
	} {
		stdout, stderr, code := harness.CryoSplit(t, nil, args...)
		if code != 2 {
			t.Errorf("cryo %v: exit %d, want 2\n%s%s", args, code, stdout, stderr)
			continue
		}
		if stdout != "" || !strings.HasPrefix(stderr, "cryo: ") || !strings.Contains(stderr, "--help'") || strings.Count(stderr, "\n") > 3 {
			t.Errorf("cryo %v: want one error line and the help to read on stderr, got stdout %q stderr %q", args, stdout, stderr)
		}
	}
	_, stderr, _ := harness.CryoSplit(t, nil, "chekpoint")
	harness.WantIn(t, stderr, `unknown command "chekpoint"`, "did you mean checkpoint?")
}

// TestCLIVersion: `cryo version`, `--version` and `-v` say which cryo this
// is; `version --json` parses.
func TestCLIVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-v"}, {"version"}} {
		stdout, stderr, code := harness.CryoSplit(t, nil, args...)
		if code != 0 || !strings.HasPrefix(stdout, "cryo ") || !strings.Contains(stdout, "commit") {
			t.Fatalf("cryo %v: exit %d, stdout %q stderr %q", args, code, stdout, stderr)
		}
	}
	stdout, _, _ := harness.CryoSplit(t, nil, "version", "--json")
	var v struct{ Version, Go, CRIU, Kernel string }
	wantJSON(t, "version --json", stdout, &v)
	if v.Version == "" || v.Go == "" || v.Kernel == "" || !strings.HasPrefix(v.CRIU, "4.") {
		t.Fatalf("version --json: %+v", v)
	}
	out := harness.Run(t, time.Minute, nil, harness.CryoBin(t, "containerd-shim-cryo-v2"), "-v")
	harness.WantIn(t, out, "Version:", strings.Fields(v.Version)[0])
}

// TestCLIHelp: `cryo help CMD` is `cryo CMD --help`, and the help topics
// exist.
func TestCLIHelp(t *testing.T) {
	a, _, code := harness.CryoSplit(t, nil, "help", "image", "build")
	b, _, _ := harness.CryoSplit(t, nil, "image", "build", "--help")
	if code != 0 || a != b || !strings.Contains(a, "--encryption-key") {
		t.Fatalf("help image build (exit %d) differs from image build --help:\n%s\n---\n%s", code, a, b)
	}
	for _, topic := range []string{"environment", "interrupted", "locking", "digests"} {
		out, _, code := harness.CryoSplit(t, nil, "help", topic)
		if code != 0 || len(out) < 200 {
			t.Fatalf("cryo help %s: exit %d:\n%s", topic, code, out)
		}
	}
}

// TestCLICompletion: the generated completion scripts load in their shells
// and complete cryo's commands and flags.
func TestCLICompletion(t *testing.T) {
	script, _, code := harness.CryoSplit(t, nil, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d", code)
	}
	f := filepath.Join(t.TempDir(), "cryo.bash")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// Load the script, then ask it to complete "cryo image b" as bash does
	// on TAB, and "cryo checkpoint --lea".
	probe := `source /usr/share/bash-completion/bash_completion; source "$1"; complete -p cryo >/dev/null || exit 3
export PATH="$2:$PATH"
COMP_WORDS=(cryo image b); COMP_CWORD=2; COMP_LINE="cryo image b"; COMP_POINT=${#COMP_LINE}
__start_cryo cryo b cryo; echo "${COMPREPLY[@]}"
COMP_WORDS=(cryo checkpoint --lea); COMP_CWORD=2; COMP_LINE="cryo checkpoint --lea"; COMP_POINT=${#COMP_LINE}
__start_cryo cryo --lea checkpoint; echo "${COMPREPLY[@]}"`
	out := harness.Run(t, time.Minute, nil, "bash", "-c", probe, "probe", f, filepath.Dir(harness.CryoBin(t, "cryo")))
	harness.WantIn(t, out, "build", "--leave-running")
	for _, sh := range []string{"zsh", "fish", "powershell"} {
		if s, _, code := harness.CryoSplit(t, nil, "completion", sh); code != 0 || len(s) < 500 {
			t.Fatalf("completion %s: exit %d, %d bytes", sh, code, len(s))
		}
	}
}

// TestCLIFlagsAnywhereAndJSON: flags after the arguments are parsed, and
// every command with --json prints one document that parses: checkpoint,
// inspect, image build/ls, image restore (a bare process), cuda state,
// restore.
func TestCLIFlagsAnywhereAndJSON(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	store := filepath.Join(t.TempDir(), "store")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")

	var st []struct {
		PID   int    `json:"pid"`
		State string `json:"state"`
	}
	stdout, stderr, code := harness.CryoSplit(t, env, "cuda", "state", strconv.Itoa(p.PID), "--json")
	wantJSON(t, "cuda state --json", stdout, &st)
	if code != 0 || len(st) != 1 || st[0].PID != p.PID || st[0].State != "running" {
		t.Fatalf("cuda state --json: exit %d %+v\n%s", code, st, stderr)
	}

	var ck struct {
		PID           int   `json:"pid"`
		ImageBytes    int64 `json:"image_bytes"`
		CUDAProcesses []any `json:"cuda_processes"`
		Steps         []struct {
			Name    string  `json:"name"`
			Seconds float64 `json:"seconds"`
		} `json:"steps"`
		CRIU map[string]any `json:"criu_statistics"`
	}
	stdout, stderr, code = harness.CryoSplit(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--json")
	if code != 0 {
		t.Fatalf("checkpoint --json: exit %d\n%s", code, stderr)
	}
	wantJSON(t, "checkpoint --json", stdout, &ck)
	if ck.PID != p.PID || ck.ImageBytes == 0 || len(ck.CUDAProcesses) != 1 || len(ck.Steps) < 3 || ck.CRIU["pages_written"] == nil {
		t.Fatalf("checkpoint --json: %+v", ck)
	}
	killDumped(t, p)

	var sum map[string]any
	stdout, _, code = harness.CryoSplit(t, env, "inspect", img, "--json")
	wantJSON(t, "inspect DIR --json", stdout, &sum)
	if code != 0 || sum["kind"] != "process" {
		t.Fatalf("inspect --json: exit %d: %v", code, sum)
	}

	ref := "localhost:5999/cli/contract:v1"
	stdout, stderr, code = harness.CryoSplit(t, env, "image", "build", img, ref, "--store", store, "-q")
	if code != 0 || !strings.HasPrefix(stdout, "sha256:") || stderr != "" {
		t.Fatalf("image build -q: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	var ls []struct {
		Ref, Kind, Digest string
		Size              int64 `json:"size"`
	}
	stdout, _, _ = harness.CryoSplit(t, env, "image", "ls", "--store", store, "--format", "json")
	wantJSON(t, "image ls --format json", stdout, &ls)
	if len(ls) != 1 || ls[0].Ref != ref || ls[0].Kind != "process" || ls[0].Size == 0 || !strings.HasPrefix(ls[0].Digest, "sha256:") {
		t.Fatalf("image ls: %+v", ls)
	}
	// --verify: the store image and the directory match their manifest; a
	// flipped byte in the directory is named, exit 1.
	for _, target := range []string{ref, img} {
		if out, stderr, code := harness.CryoSplit(t, env, "inspect", target, "--verify", "--store", store); code != 0 || !strings.Contains(out, "verified") {
			t.Fatalf("inspect --verify %s: exit %d\n%s%s", target, code, out, stderr)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(img, "pages-*.img"))
	f, err := os.OpenFile(pages[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff, 0xee}, 100)
	f.Close()
	_, stderr, code = harness.CryoSplit(t, env, "inspect", "--verify", img)
	if code != 1 || !strings.Contains(stderr, filepath.Base(pages[0])) {
		t.Fatalf("inspect --verify of a corrupted dir: exit %d, want 1 naming %s:\n%s", code, filepath.Base(pages[0]), stderr)
	}
	text, _, _ := harness.CryoSplit(t, env, "image", "ls", "--store", store)
	harness.WantIn(t, text, "REF", "KIND", "GPUS", "SIZE", "CREATED", "DIGEST", ref, "process")

	var rs struct {
		PID   int `json:"pid"`
		Steps []any
	}
	stdout, stderr, code = harness.CryoSplit(t, env, "image", "restore", ref, "--store", store, "--json")
	if code != 0 {
		t.Fatalf("image restore REF --store S --json: exit %d\n%s", code, stderr)
	}
	wantJSON(t, "image restore --json", stdout, &rs)
	if rs.PID != p.PID || len(rs.Steps) == 0 {
		t.Fatalf("image restore --json: %+v", rs)
	}
	before := p.LastTick(t)
	p.WaitTicks(t, before+3)
}

// TestCLIFailureAndInterruptExitCodes: a failure exits 1 with one "cryo:"
// line; Ctrl-C during a checkpoint exits 130 after the rollback, and the
// workload runs on with CUDA resumed.
func TestCLIFailureAndInterruptExitCodes(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	_, stderr, code := harness.CryoSplit(t, env, "restore", "--dir", t.TempDir())
	if code != 1 || strings.Count(stderr, "cryo: ") != 1 {
		t.Fatalf("restore of an empty dir: exit %d, want 1 and one error line:\n%s", code, stderr)
	}

	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	cmd, hold, out := startHeldCheckpoint(t, env, p, img, "dump")
	interruptHeld(t, cmd, hold, out, syscall.SIGINT)
	err := cmd.Wait()
	if code := harness.ExitCode(err); code != 130 {
		t.Fatalf("interrupted checkpoint: exit %d, want 130:\n%s", code, out)
	}
	t.Logf("%s", out.String())
	harness.WantIn(t, out.String(), "interrupted by SIGINT", "failed at step dump", "CUDA resumed", "remedy: none needed")
	if strings.Contains(out.String(), "written to") {
		t.Fatalf("an interrupted checkpoint went on to the end:\n%s", out.String())
	}
	if !p.Alive() {
		t.Fatalf("the process is gone after an interrupted checkpoint:\n%s", out.String())
	}
	before := p.LastTick(t)
	p.WaitTicks(t, before+3)
	if page, err := fakecuda.ReadPage(p.PID); err != nil || page.State != 0 {
		t.Fatalf("CUDA not resumed after the interrupt: %+v, %v", page, err)
	}
}
