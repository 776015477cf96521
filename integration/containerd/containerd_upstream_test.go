package containerd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestContainerdCheckpointSuite runs containerd's own client checkpoint
// tests (integration/client, -test.run Checkpoint, of the release of each
// containerd daemon here, 1.7 and 2.x, built by install-deps.sh into
// $CRYO_DEPS/containerd-tests) against a private containerd, once with
// the runc shim as the tests' runtime and once with cryo's: every test
// that passes with the runc shim must pass with cryo's. The tests pull
// their busybox image from a registry on loopback, built from the host's
// busybox: no network.
func TestContainerdCheckpointSuite(t *testing.T) {
	harness.RequireRoot(t)
	reg := harness.StartRegistry(t)
	image := reg.Addr + "/containerd/busybox:1.36"
	list := filepath.Join(t.TempDir(), "images.toml")
	if err := os.WriteFile(list, []byte(fmt.Sprintf("BusyBox = %q\n", image)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) { upstreamCheckpointSuite(t, v, image, list) })
	}
}

func upstreamCheckpointSuite(t *testing.T, v harness.CtrdVersion, image, list string) {
	bin := upstreamClientTests(t, v)
	results := map[string]map[string]string{}
	for i, rt := range []string{"io.containerd.runc.v2", harness.CryoRuntime} {
		d := harness.NewDaemon(t, v, false)
		if v.ConfigVersion >= 3 {
			// The 2.x client connects only to a daemon with a pod sandbox
			// controller, which comes with the CRI plugins: keep them all.
			d.CRI = "# every plugin, CRI's included\n"
		}
		d.Start()
		t.Cleanup(func() { d.KillAllIn("testing") }) // before d.stop, on a t.Fatal
		if i == 0 {
			pushBusybox(t, d, image)
		}
		start := time.Now()
		out, err := runUpstreamClient(d, bin, list, rt)
		results[rt] = goTestResults(out)
		t.Logf("%s with runtime %s (%s, %v):\n%s", filepath.Base(bin), rt, time.Since(start).Round(time.Second), err, summary(results[rt]))
		if err != nil && len(results[rt]) == 0 {
			t.Fatalf("%s with %s ran no test: %v\n%s", bin, rt, err, harness.LastLines(out, 60))
		}
		if rt == harness.CryoRuntime {
			t.Logf("failures with %s:\n%s", rt, failureLogs(out))
		}
		// What a failed upstream test left in its namespace ("testing").
		d.KillAllIn("testing")
		d.Stop()
	}
	for name, r := range results["io.containerd.runc.v2"] {
		if r == "PASS" && results[harness.CryoRuntime][name] != "PASS" {
			t.Errorf("%s passes with the runc shim but is %q with %s", name, results[harness.CryoRuntime][name], harness.CryoRuntime)
		}
	}
}

// upstreamClientTests returns the test binary of containerd's
// integration/client of the daemon's release, skipping when install-deps
// has not built it.
func upstreamClientTests(t *testing.T, v harness.CtrdVersion) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(harness.DepsDir(), v.Dir, "usr/bin/containerd"), "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v: run `make deps`", v.Name, err)
	}
	m := regexp.MustCompile(` (\d+\.\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no version in %q", out)
	}
	bin := filepath.Join(harness.DepsDir(), "containerd-tests", "client-v"+string(m[1])+".test")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("containerd's client tests are not built (%v): run `make deps` (contrib/install-deps.sh builds them)", err)
	}
	return bin
}

// pushBusybox builds an image of the host's static busybox, with a link
// for every applet, imports it into d and pushes it to the registry as ref.
func pushBusybox(t *testing.T, d *harness.Daemon, ref string) {
	t.Helper()
	root := filepath.Join(d.Dir, "busybox", "rootfs")
	for _, dir := range []string{"bin", "tmp", "proc", "sys", "dev", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	harness.CopyFile(t, "/bin/busybox", filepath.Join(root, "bin/busybox"), 0o755)
	for _, a := range strings.Fields(harness.Run(t, 10*time.Second, nil, "/bin/busybox", "--list")) {
		if a != "busybox" {
			if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(d.Dir, "busybox", "image.tar")
	harness.BuildImageTarAs(t, root, archive, ref, []string{"sh"})
	d.Ctr("images", "import", archive)
	d.Ctr("images", "push", "--plain-http", ref)
}

// runUpstreamClient runs the checkpoint tests against d's socket with
// runtime rt (TEST_RUNTIME: the client's default runtime), with CRIU 4.2.1
// first on PATH (the tests skip without a criu there). The image list
// comes through CONTAINERD_TEST_IMAGE_LIST, which install-deps.sh patches
// in as the default of the tests' -image-list: their busybox reference is
// computed at package init, before flags are parsed, so the flag itself
// never reaches it.
func runUpstreamClient(d *harness.Daemon, bin, list, rt string) (string, error) {
	env := []string{"TEST_RUNTIME=" + rt, "PATH=/usr/local/sbin:" + os.Getenv("PATH"), "CONTAINERD_TEST_IMAGE_LIST=" + list}
	return harness.RunErr(10*time.Minute, env, bin, "-test.run", "Checkpoint", "-test.v", "-test.count=1", "-test.root",
		"-no-daemon", "-address", d.Socket)
}

var goTestLine = regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)`)

// goTestResults maps each test and subtest to PASS, FAIL or SKIP.
func goTestResults(out string) map[string]string {
	r := map[string]string{}
	for _, m := range goTestLine.FindAllStringSubmatch(out, -1) {
		r[m[2]] = m[1]
	}
	return r
}

func summary(r map[string]string) string {
	names := make([]string, 0, len(r))
	for n := range r {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "  %s %s\n", r[n], n)
	}
	return b.String()
}

// failureLogs is the output of the failed tests: the lines between a
// test's "=== RUN" and its "--- FAIL".
func failureLogs(out string) string {
	var b strings.Builder
	var cur []string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "=== RUN"):
			cur = []string{line}
		case strings.Contains(line, "--- FAIL"):
			b.WriteString(strings.Join(append(cur, line), "\n") + "\n")
			cur = nil
		default:
			cur = append(cur, line)
		}
	}
	return b.String()
}
