package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// BinDir holds cryo's binaries: $CRYO_BIN or <repo>/bin.
func BinDir() string {
	if d := os.Getenv("CRYO_BIN"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "bin")
}

// DepsDir is where install-deps.sh unpacks containerd: $CRYO_DEPS or /opt/cryo-deps.
func DepsDir() string {
	if d := os.Getenv("CRYO_DEPS"); d != "" {
		return d
	}
	return "/opt/cryo-deps"
}

// CryoBin returns the path of one of cryo's names (cryo, cryo-runc,
// containerd-shim-cryo-v2, cryo-criu-action), failing the test if absent.
func CryoBin(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(BinDir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s missing (%v): run `make build` first", p, err)
	}
	return p
}

// FakeFile returns a file of the fake GPU driver build (libcuda.so.1,
// libnvidia-ml.so.1, fakecuda-app), failing the test if absent.
func FakeFile(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(BinDir(), "fake", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s missing (%v): run `make fake` first", p, err)
	}
	return p
}

// FakeDriverEnv is the environment that points cryo at the fake driver;
// faults is CRYO_FAKE_CUDA_FAULTS (may be empty).
func FakeDriverEnv(t testing.TB, faults string) []string {
	env := []string{
		"CRYO_LIBCUDA=" + FakeFile(t, "libcuda.so.1"),
		"CRYO_LIBNVML=" + FakeFile(t, "libnvidia-ml.so.1"),
	}
	if faults != "" {
		env = append(env, "CRYO_FAKE_CUDA_FAULTS="+faults)
	}
	return env
}

// RequireRoot skips nothing: these tests are the product's proof, so a
// missing privilege is a failure with the remedy.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("integration tests need root (CRIU, runc, containerd): run `sudo make test`")
	}
}

// Run runs a command with a deadline and returns its combined output,
// failing the test on error.
func Run(t testing.TB, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	out, err := RunErr(timeout, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// RunErr is run without failing: for commands expected to fail.
func RunErr(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	// A command that leaves a process behind holding its output (runc run
	// -d of a container with runc's stdio) must not hold the test until
	// that process ends: stop reading a moment after the command exits.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil // it exited successfully; only its output was held open
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s: %w", timeout, err)
	}
	return buf.String(), err
}

// CryoFails runs cryo with args, expecting it to fail, and returns its output.
func CryoFails(t testing.TB, timeout time.Duration, env []string, args ...string) string {
	t.Helper()
	out, err := RunErr(timeout, env, CryoBin(t, "cryo"), args...)
	if err == nil {
		t.Fatalf("cryo %s succeeded, want a failure:\n%s", strings.Join(args, " "), out)
	}
	return out
}

// WantIn fails the test unless out contains every one of wants.
func WantIn(t testing.TB, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// WaitFor polls cond until it is true or the timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}

// NewRootfs builds a minimal container root filesystem: busybox (static) with
// its applets, plus the fake CUDA application, its shared libraries and the
// fake libcuda at /usr/lib/libcuda.so.1.
func NewRootfs(t testing.TB, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "usr/lib", "lib64", "lib/x86_64-linux-gnu", "tmp", "proc", "sys", "dev", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	CopyFile(t, "/bin/busybox", filepath.Join(root, "bin/busybox"), 0o755)
	for _, applet := range []string{"sh", "sleep", "cat", "echo", "ls", "ps", "true", "false", "kill", "seq", "date", "tail", "head", "wc", "grep", "env"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	app := FakeFile(t, "fakecuda-app")
	CopyFile(t, app, filepath.Join(root, "bin/fakecuda-app"), 0o755)
	CopyFile(t, FakeFile(t, "netserver"), filepath.Join(root, "bin/netserver"), 0o755)
	CopyFile(t, FakeFile(t, "libcuda.so.1"), filepath.Join(root, "usr/lib/libcuda.so.1"), 0o755)
	for _, lib := range SharedLibs(t, app) {
		CopyFile(t, lib, filepath.Join(root, lib), 0o755)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// SharedLibs lists the absolute paths of the libraries a binary loads (ldd).
func SharedLibs(t testing.TB, bin string) []string {
	t.Helper()
	out := Run(t, 30*time.Second, nil, "ldd", bin)
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
			}
		}
	}
	return libs
}

func CopyFile(t testing.TB, src, dst string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
}
