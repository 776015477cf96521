package runcwrap

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
)

// TestMain lets the test binary be cryo-runc: called under that name
// (a link the tests make), it runs Main on its arguments, as cmd/cryo
// does, so that the tests see what a caller of cryo-runc sees.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "cryo-runc" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// realRuncOrSkip is the runc on PATH; the tests that need a real one
// skip without it.
func realRuncOrSkip(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("no runc on PATH")
	}
	return p
}

// cryoRunc is a link named cryo-runc to this test binary, in dir.
func cryoRunc(t *testing.T, dir, name string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, name)
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// runWrapper runs cryo-runc with args and an environment of only env and
// PATH; it returns stdout, stderr and the exit status.
func runWrapper(t *testing.T, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", bin, err)
	}
	return out.String(), errb.String(), 0
}

// Commands cryo does not act on reach the real runc by exec, with the
// caller's flags (--root) and without cryo-runc's own (--cryo-env, which
// runc would refuse): runc's output, its errors and its exit status are
// what the caller gets (runc's 3 for a command it does not know, not
// cryo-runc's 1). The environment file names the real runc.
func TestPassThroughToRealRunc(t *testing.T) {
	runc := realRuncOrSkip(t)
	if os.Geteuid() != 0 {
		t.Skip("runc's state directory needs root")
	}
	dir := t.TempDir()
	bin := cryoRunc(t, dir, "cryo-runc")
	envFile := filepath.Join(dir, "cryo-runc.env")
	if err := os.WriteFile(envFile, []byte("# the real one\nCRYO_RUNC="+runc+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "state")
	for _, c := range []struct {
		args      []string
		code      int
		stdout    string
		stderr    string
		rootAfter bool
	}{
		{[]string{"--cryo-env", envFile, "--root", root, "list"}, 0, "ID", "", true},
		{[]string{"--root", root, "--cryo-env=" + envFile, "list", "--format", "json"}, 0, "null", "", true},
		{[]string{"--cryo-env", envFile, "--root", root, "state", "nosuch"}, 1, "", "container does not exist", true},
		{[]string{"--cryo-env", envFile, "--root", root, "no-such-command"}, 3, "", "No help topic for 'no-such-command'", false},
		{[]string{"--cryo-env", envFile, "--version"}, 0, "runc version", "", false},
	} {
		os.RemoveAll(root)
		out, errOut, code := runWrapper(t, bin, nil, c.args...)
		if code != c.code || !strings.Contains(out, c.stdout) || !strings.Contains(errOut, c.stderr) {
			t.Errorf("cryo-runc %q: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout with %q, stderr with %q",
				c.args, code, out, errOut, c.code, c.stdout, c.stderr)
		}
		if strings.Contains(errOut, "cryo-env") {
			t.Errorf("cryo-runc %q: runc saw --cryo-env: %s", c.args, errOut)
		}
		if _, err := os.Stat(root); err != nil && c.rootAfter {
			t.Errorf("cryo-runc %q: runc's --root %s not used (%v)", c.args, root, err)
		}
	}
	// --version answers runc's lines first, then the cryo that wraps it.
	out, _, _ := runWrapper(t, bin, nil, "--cryo-env", envFile, "--version")
	if i, j := strings.Index(out, "runc version"), strings.Index(out, "cryo-runc: cryo "); i < 0 || j < i {
		t.Errorf("cryo-runc --version:\n%s\nwant runc's version, then cryo's", out)
	}
}

// cryo-runc may be installed as `runc` itself, first on PATH: it must
// find the real one after it and never exec itself; CRYO_RUNC naming it
// is refused, and so is a CRYO_RUNC that is not there.
func TestRealRuncNeverItself(t *testing.T) {
	runc := realRuncOrSkip(t)
	dir := t.TempDir()
	self := cryoRunc(t, dir, "runc")
	path := dir + ":" + filepath.Dir(runc)
	got, err := realRunc(config.Config{Environ: []string{"PATH=" + path}})
	if err != nil || got != filepath.Join(filepath.Dir(runc), "runc") {
		t.Errorf("realRunc with %s first on PATH: %q, %v; want %s", self, got, err, runc)
	}
	if _, err := realRunc(config.Config{Runc: self}); !errors.Is(err, errNoRunc) || !strings.Contains(err.Error(), "cryo-runc itself") {
		t.Errorf("CRYO_RUNC=%s (this binary): %v, want a refusal", self, err)
	}
	if _, err := realRunc(config.Config{Runc: filepath.Join(dir, "missing")}); !errors.Is(err, errNoRunc) {
		t.Errorf("CRYO_RUNC naming nothing: %v, want errNoRunc", err)
	}
	if _, err := realRunc(config.Config{Environ: []string{"PATH=" + dir}}); !errors.Is(err, errNoRunc) {
		t.Errorf("PATH holding only cryo-runc as runc: %v, want errNoRunc", err)
	}
	// Through Main: a CRYO_RUNC that is cryo-runc fails with the reason,
	// exit 1, before anything runs.
	bin := cryoRunc(t, dir, "cryo-runc")
	_, errOut, code := runWrapper(t, bin, []string{"CRYO_RUNC=" + self}, "list")
	if code != 1 || !strings.Contains(errOut, "cryo-runc itself") {
		t.Errorf("cryo-runc with CRYO_RUNC=itself: exit %d, stderr %q", code, errOut)
	}
}

// A --cryo-env file that cannot be read, or that holds a line that is no
// setting, stops cryo-runc with the file's name and the line, exit 1.
func TestEnvFileErrors(t *testing.T) {
	dir := t.TempDir()
	bin := cryoRunc(t, dir, "cryo-runc")
	bad := filepath.Join(dir, "bad.env")
	if err := os.WriteFile(bad, []byte("CRYO_RUNC=/usr/sbin/runc\njust words\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file, want string
	}{{filepath.Join(dir, "missing.env"), "missing.env"}, {bad, "bad.env:2"}} {
		_, errOut, code := runWrapper(t, bin, nil, "--cryo-env", c.file, "list")
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("cryo-runc --cryo-env %s: exit %d, stderr %q; want 1 and %q", c.file, code, errOut, c.want)
		}
	}
}
