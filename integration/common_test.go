// Package integration runs cryo end to end against real containerd, runc,
// CRIU, Podman and a registry server, all started by the tests themselves on
// loopback in temporary directories. Only the GPU driver is fake (internal/cuda's
// fake libcuda), because CI machines have no GPU.
//
// The tests need root and the parts that `make deps` installs, and the
// binaries that `make build fake` writes to bin/ (or $CRYO_BIN).
package integration

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

// repoRoot is the repository's top directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// binDir holds cryo's binaries: $CRYO_BIN or <repo>/bin.
func binDir() string {
	if d := os.Getenv("CRYO_BIN"); d != "" {
		return d
	}
	return filepath.Join(repoRoot(), "bin")
}

// depsDir is where install-deps.sh unpacks containerd: $CRYO_DEPS or /opt/cryo-deps.
func depsDir() string {
	if d := os.Getenv("CRYO_DEPS"); d != "" {
		return d
	}
	return "/opt/cryo-deps"
}

// cryoBin returns the path of one of cryo's names (cryo, cryo-runc,
// containerd-shim-cryo-v2, cryo-criu-action), failing the test if absent.
func cryoBin(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(binDir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s missing (%v): run `make build` first", p, err)
	}
	return p
}

// fakeFile returns a file of the fake GPU driver build (libcuda.so.1,
// libnvidia-ml.so.1, fakecuda-app), failing the test if absent.
func fakeFile(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(binDir(), "fake", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s missing (%v): run `make fake` first", p, err)
	}
	return p
}

// fakeDriverEnv is the environment that points cryo at the fake driver;
// faults is CRYO_FAKE_CUDA_FAULTS (may be empty).
func fakeDriverEnv(t testing.TB, faults string) []string {
	env := []string{
		"CRYO_LIBCUDA=" + fakeFile(t, "libcuda.so.1"),
		"CRYO_LIBNVML=" + fakeFile(t, "libnvidia-ml.so.1"),
	}
	if faults != "" {
		env = append(env, "CRYO_FAKE_CUDA_FAULTS="+faults)
	}
	return env
}

// requireRoot skips nothing: these tests are the product's proof, so a
// missing privilege is a failure with the remedy.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("integration tests need root (CRIU, runc, containerd): run `sudo make test`")
	}
}

// run runs a command with a deadline and returns its combined output,
// failing the test on error.
func run(t testing.TB, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(timeout, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// runErr is run without failing: for commands expected to fail.
func runErr(timeout time.Duration, env []string, name string, args ...string) (string, error) {
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

// cryoFails runs cryo with args, expecting it to fail, and returns its output.
func cryoFails(t testing.TB, timeout time.Duration, env []string, args ...string) string {
	t.Helper()
	out, err := runErr(timeout, env, cryoBin(t, "cryo"), args...)
	if err == nil {
		t.Fatalf("cryo %s succeeded, want a failure:\n%s", strings.Join(args, " "), out)
	}
	return out
}

// wantIn fails the test unless out contains every one of wants.
func wantIn(t testing.TB, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// waitFor polls cond until it is true or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
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

// newRootfs builds a minimal container root filesystem: busybox (static) with
// its applets, plus the fake CUDA application, its shared libraries and the
// fake libcuda at /usr/lib/libcuda.so.1.
func newRootfs(t testing.TB, dir string) string {
	t.Helper()
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "usr/lib", "lib64", "lib/x86_64-linux-gnu", "tmp", "proc", "sys", "dev", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, "/bin/busybox", filepath.Join(root, "bin/busybox"), 0o755)
	for _, applet := range []string{"sh", "sleep", "cat", "echo", "ls", "ps", "true", "false", "kill", "seq", "date", "tail", "head", "wc", "grep", "env"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	app := fakeFile(t, "fakecuda-app")
	copyFile(t, app, filepath.Join(root, "bin/fakecuda-app"), 0o755)
	copyFile(t, fakeFile(t, "netserver"), filepath.Join(root, "bin/netserver"), 0o755)
	copyFile(t, fakeFile(t, "libcuda.so.1"), filepath.Join(root, "usr/lib/libcuda.so.1"), 0o755)
	for _, lib := range sharedLibs(t, app) {
		copyFile(t, lib, filepath.Join(root, lib), 0o755)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// sharedLibs lists the absolute paths of the libraries a binary loads (ldd).
func sharedLibs(t testing.TB, bin string) []string {
	t.Helper()
	out := run(t, 30*time.Second, nil, "ldd", bin)
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

func copyFile(t testing.TB, src, dst string, mode os.FileMode) {
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
