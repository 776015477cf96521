package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/report"
)

// runCLI runs the command tree in-process as Main does and returns the exit
// code, stdout and the error report.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ap := newApp(config.FromEnv())
	ap.stdout = &out
	root := ap.newRoot()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	code := reportError(context.Background(), &errOut, root.ExecuteContext(context.Background()))
	return code, out.String(), errOut.String()
}

func wantRun(t *testing.T, code int, msg string, args ...string) string {
	t.Helper()
	got, out, errOut := runCLI(t, args...)
	if got != code || !strings.Contains(errOut, msg) {
		t.Errorf("cryo %s: exit %d, stderr %q; want exit %d and %q", strings.Join(args, " "), got, errOut, code, msg)
	}
	return out
}

func TestUnknownCommands(t *testing.T) {
	wantRun(t, ExitUsage, `unknown command "nonexist" for "cryo"`, "help", "nonexist")
	wantRun(t, ExitUsage, `unknown command "bogus" for "cryo image"`, "help", "image", "bogus")
	wantRun(t, ExitUsage, `unknown command "checkpint" for "cryo"; did you mean checkpoint?`, "checkpint", "--pid", "1")
	wantRun(t, ExitUsage, `unknown command "bogus" for "cryo image"`, "image", "bogus", "--x")
	if out := wantRun(t, ExitOK, "", "help", "image", "build"); !strings.Contains(out, "cryo image build") {
		t.Errorf("cryo help image build: %q", out)
	}
}

func TestBadFlagValues(t *testing.T) {
	wantRun(t, ExitUsage, `--pid: "abc" is not a process id`, "checkpoint", "--pid", "abc", "--dir", t.TempDir())
	_, _, errOut := runCLI(t, "checkpoint", "--pid", "abc", "--dir", t.TempDir())
	if strings.Contains(errOut, "strconv") {
		t.Errorf("parser's words leak: %q", errOut)
	}
	wantRun(t, ExitUsage, `--lock-timeout: "soon" is not a duration`, "checkpoint", "--lock-timeout", "soon")
}

func TestFinishContradictions(t *testing.T) {
	dir := t.TempDir()
	wantRun(t, ExitUsage, "--finish cannot be combined with --dir, --pid", "checkpoint", "--pid", "1", "--dir", dir, "--finish", dir)
	wantRun(t, ExitUsage, "--finish cannot be combined with --leave-running", "checkpoint", "--finish", dir, "--leave-running")
}

func TestBadCopyTimeoutEnv(t *testing.T) {
	t.Setenv(config.EnvCopyTimeout, "-1s")
	wantRun(t, ExitUsage, `CRYO_COPY_TIMEOUT="-1s": not a positive duration`, "checkpoint", "--pid", "1", "--dir", filepath.Join(t.TempDir(), "d"))
	wantRun(t, ExitUsage, "remedy: unset CRYO_COPY_TIMEOUT", "cuda", "suspend", "1")
	// An explicit flag overrides the variable: the check moves past it.
	if code, _, errOut := runCLI(t, "cuda", "suspend", "--copy-timeout", "1m", "1"); strings.Contains(errOut, config.EnvCopyTimeout) {
		t.Errorf("--copy-timeout did not override the variable: exit %d, %q", code, errOut)
	}
}

func TestPathTargets(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "x.tar.gz")
	wantRun(t, ExitFailure, "no such file or directory: "+missing, "image", "restore", missing)
	wantRun(t, ExitFailure, "no such file or directory: ./nonexist.tar", "restore", "--image", "./nonexist.tar")
	wantRun(t, ExitFailure, "no such file or directory: "+missing, "restore", "--dir", missing)
	wantRun(t, ExitUsage, "is a path; remedy: `cryo restore --dir", "image", "restore", t.TempDir())
}

func TestStoreNotCreated(t *testing.T) {
	store := filepath.Join(t.TempDir(), "nonexistent")
	wantRun(t, ExitFailure, "image store "+store+" does not exist", "image", "ls", "--store", store)
	wantRun(t, ExitFailure, "does not exist", "image", "rm", "--store", store, "a/b:c")
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Errorf("image ls created the store %s: %v", store, err)
	}
	// The default store of a fresh host: an empty list.
	t.Setenv(config.EnvImageStore, store)
	wantRun(t, ExitOK, "", "image", "ls")
}

func TestPlural(t *testing.T) {
	if got := plural(1, "CUDA process", "CUDA processes"); got != "1 CUDA process" {
		t.Error(got)
	}
	if got := plural(0, "CUDA process", "CUDA processes"); got != "0 CUDA processes" {
		t.Error(got)
	}
}

func TestNotPermitted(t *testing.T) {
	if !notPermitted(&PathError{Path: "/x", Err: os.ErrPermission}) || notPermitted(&PathError{Path: "/x", Err: ErrNoSuchPath}) {
		t.Error("notPermitted misjudges a PathError")
	}
	var b bytes.Buffer
	if code := reportError(context.Background(), &b, &PathError{Path: "/x", Err: os.ErrPermission}); code != ExitNotPermitted ||
		b.String() != "cryo: permission denied: /x (run as root or fix its mode)\n" {
		t.Errorf("exit %d, %q", code, b.String())
	}
}

func TestTermHandler(t *testing.T) {
	var b bytes.Buffer
	l := warnLoggerTo(&b)
	l.Warn("cryo step failed", "id", "x", "step", "dump", "error", "boom")
	l.Info("cryo step done", "id", "x")
	l.Warn("GPU inventory unavailable on this host", "error", "no nvml")
	if got, want := b.String(), "cryo: warning: GPU inventory unavailable on this host (error no nvml)\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A flag value of the wrong type names an example of a right one as the
// usage error's remedy, a value a report prints in its place.
func TestBadValueRemedy(t *testing.T) {
	checkpoint, _, err := newApp(config.Config{}).newRoot().Find([]string{"checkpoint"})
	if err != nil {
		t.Fatal(err)
	}
	for flag, remedy := range map[string]string{"pid": "give a number such as 4242", "lock-timeout": "give one such as 90s or 5m"} {
		f := checkpoint.Flag(flag)
		var rm report.Remedied
		if err := badValue(f, "x"); !errors.As(err, &rm) || rm.RemedyText() != remedy {
			t.Errorf("--%s: %v, want the remedy %q", flag, err, remedy)
		}
	}
}
