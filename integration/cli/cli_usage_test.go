package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestCLIUsageMistakes: typos, contradicting flags, bad values and paths
// are named for what they are, with the exit code of the table in
// docs/cli.md (2 bad usage, 1 failure), and nothing is created.
func TestCLIUsageMistakes(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "nonexistent")
	for _, c := range []struct {
		env  []string
		args []string
		code int
		want string
	}{
		{nil, []string{"help", "nonexist"}, 2, `unknown command "nonexist" for "cryo"`},
		{nil, []string{"checkpint", "--pid", "1"}, 2, `unknown command "checkpint" for "cryo"; did you mean checkpoint?`},
		{nil, []string{"checkpoint", "--pid", "abc", "--dir", dir}, 2, `--pid: "abc" is not a process id`},
		{nil, []string{"checkpoint", "--pid", "1", "--dir", dir, "--finish", dir}, 2, "--finish cannot be combined with --dir, --pid"},
		{[]string{"CRYO_COPY_TIMEOUT=-1s"}, []string{"checkpoint", "--pid", "1", "--dir", filepath.Join(dir, "img")}, 2, `CRYO_COPY_TIMEOUT="-1s": not a positive duration`},
		{nil, []string{"inspect", "./nonexist.tar"}, 1, "no such file or directory: ./nonexist.tar"},
		{nil, []string{"image", "restore", "/tmp/cryo-nonexist.tar.gz"}, 1, "no such file or directory: /tmp/cryo-nonexist.tar.gz"},
		{nil, []string{"image", "ls", "--store", store}, 1, "image store " + store + " does not exist"},
		{nil, []string{"image", "push", "./nonexist.tar"}, 1, "no such file or directory: ./nonexist.tar"},
		{nil, []string{"image", "push", dir}, 2, "REF takes an image of the store, and " + dir + " is a path"},
		{nil, []string{"image", "export", "/tmp/cryo-nonexist-dir", filepath.Join(dir, "out.tar")}, 1, "no such file or directory: /tmp/cryo-nonexist-dir"},
	} {
		out, err := harness.RunErr(harness.BareTimeout, c.env, harness.CryoBin(t, "cryo"), c.args...)
		if code := harness.ExitCode(err); code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("cryo %s: exit %d, want %d and %q:\n%s", strings.Join(c.args, " "), code, c.code, c.want, out)
		}
		if strings.Contains(out, "strconv.") || strings.Contains(out, "level=") {
			t.Errorf("cryo %s: Go's words leak:\n%s", strings.Join(c.args, " "), out)
		}
	}
	if _, err := exec.LookPath("ls"); err == nil {
		if out, _ := harness.RunErr(harness.BareTimeout, nil, "ls", store); !strings.Contains(out, "No such file") {
			t.Errorf("image ls created the store %s", store)
		}
	}
}

// TestCLINotPermitted: a non-root checkpoint exits 77 (not permitted), not
// 2, which says the command line itself was wrong.
func TestCLINotPermitted(t *testing.T) {
	harness.RequireRoot(t)
	cmd := exec.Command(harness.CryoBin(t, "cryo"), "checkpoint", "--pid", "1", "--dir", filepath.Join(t.TempDir(), "img"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if code := harness.ExitCode(err); code != 77 {
		t.Fatalf("non-root checkpoint: exit %d, want 77:\n%s", code, out.String())
	}
	harness.WantIn(t, out.String(), "not running as root", "remedy: run as root")

	// cuda suspend and resume as nobody: the same 77 and words, not a raw
	// "permission denied" with exit 1.
	for _, verb := range []string{"suspend", "resume"} {
		cmd = exec.Command(harness.CryoBin(t, "cryo"), "cuda", verb, "1")
		cmd.Env = append(os.Environ(), harness.FakeDriverEnv(t, "")...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out.Reset()
		cmd.Stdout, cmd.Stderr = &out, &out
		if code := harness.ExitCode(cmd.Run()); code != 77 {
			t.Fatalf("non-root cuda %s: exit %d, want 77:\n%s", verb, code, out.String())
		}
		harness.WantIn(t, out.String(), "not running as root", "remedy: run as root")
	}

	// A checkpoint directory only root may read: `cryo inspect` as another
	// user says permission denied (77), not "holds neither CRIU images".
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	harness.WriteFile(t, filepath.Join(dir, "inventory.img"), "")
	cmd = exec.Command(harness.CryoBin(t, "cryo"), "inspect", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	if code := harness.ExitCode(cmd.Run()); code != 77 || !strings.Contains(out.String(), "permission denied: "+dir) {
		t.Fatalf("inspect of an unreadable directory as nobody: exit %d, want 77 saying permission denied:\n%s", code, out.String())
	}
}

// TestCLICheckpointSingular: one CUDA process is "1 CUDA process", and the
// terminal sees no slog records; image rm says what it removed.
func TestCLICheckpointSingular(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	out := harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--leave-running")
	harness.WantIn(t, out, "(1 CUDA process)")
	if strings.Contains(out, "process(es)") || strings.Contains(out, "level=") {
		t.Errorf("checkpoint output:\n%s", out)
	}
	store := filepath.Join(t.TempDir(), "store")
	harness.BareCryo(t, env, "image", "build", "--store", store, img, "localhost/cli/rm:v1")
	// Podman's --format templates, over the JSON fields.
	if out := harness.BareCryo(t, env, "image", "ls", "--store", store, "--format", "{{.ref}} {{.kind}}"); strings.TrimSpace(out) != "localhost/cli/rm:v1 process" {
		t.Errorf("image ls --format '{{.ref}} {{.kind}}': %q", out)
	}
	harness.WantIn(t, harness.BareCryo(t, env, "image", "rm", "--store", store, "localhost/cli/rm:v1"), "removed localhost/cli/rm:v1")
}
