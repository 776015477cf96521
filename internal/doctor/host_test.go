package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
)

// Root with the capabilities passes; another user, or root without
// CAP_SYS_ADMIN, is told to use sudo, and `criu check` is not run for a
// user whom it would refuse anyway.
func TestPrivileges(t *testing.T) {
	f := newFixture(t)
	want(t, f.env().checkPrivileges(), OK, "root")

	f.write("proc/self/status", "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n")
	want(t, f.env().checkPrivileges(), Warn, "uid 1000", "run as root (sudo)")
	want(t, f.env().criuCheck(context.Background(), "/usr/local/sbin/criu"), Skip, "needs root")

	f.write("proc/self/status", "Uid:\t0\t0\t0\t0\nCapEff:\t00000000a80425fb\n")
	want(t, f.env().checkPrivileges(), Warn, "without CAP_SYS_ADMIN", "run as root (sudo)")
}

// The huge page mode is read from sysfs; any mode is ok, and a kernel
// without THP skips.
func TestHostFiles(t *testing.T) {
	f := newFixture(t)
	want(t, f.env().checkTHP(), OK, "madvise", `"always"`)
	f.write("sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n")
	want(t, f.env().checkTHP(), OK, "always")
	f.opts.Host.Sys = f.path("empty-sys")
	want(t, f.env().checkTHP(), Skip, "not available")
	want(t, f.env().checkCgroups(), OK, "v1")
	f.write("empty-sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
	want(t, f.env().checkCgroups(), OK, "v2")

	f.opts.Config = config.Config{Problems: []error{errBadTimeout}}
	want(t, f.env().checkCopyTimeout(), Warn, "not a positive duration", "unset CRYO_COPY_TIMEOUT")
}

var errBadTimeout = &lookupError{"CRYO_COPY_TIMEOUT=\"soon\" is not a positive duration"}

// Without CRIU nothing can be checkpointed: that fails, and `criu check`
// is skipped. The installed CRIU passes both.
func TestCRIU(t *testing.T) {
	f := newFixture(t)
	f.opts.Config.CRIU = f.path("bin/criu")
	cs := f.env().checkCRIU(context.Background())
	want(t, cs[0], Fail, "make deps")
	want(t, cs[1], Skip, "no CRIU")

	want(t, cs[2], Skip, "no CRIU")

	f.opts.Config.CRIU = "/usr/local/sbin/criu"
	cs = f.env().checkCRIU(context.Background())
	want(t, cs[0], OK, "4.")
	want(t, cs[1], OK)
	want(t, cs[2], OK, "huge pages and several threads")
}

// A CRIU without cryo's patches (the stock one that `make deps` installs
// for baselines, or one with only the first patch) restores correctly but
// slower: a warning naming what it lacks. The bundle's wrapper script is
// looked through.
func TestCRIUFill(t *testing.T) {
	want(t, criuFill("/usr/local/libexec/cryo/criu-stock"), Warn, "without huge pages or several threads", "make deps")
	f := newFixture(t)
	one := f.path("criu-0001")
	if err := os.WriteFile(one, []byte("\x7fELF...huge-page fill: on...\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	want(t, criuFill(one), Warn, "without several threads")
	// The bundle's sbin/criu is a script running ../libexec/criu.
	f.mkdir("bundle/sbin")
	f.mkdir("bundle/libexec")
	script := f.path("bundle/sbin/criu")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec ../libexec/criu \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.path("bundle/libexec/criu"), []byte("huge-page fill: ...parallel fill: "), 0o755); err != nil {
		t.Fatal(err)
	}
	want(t, criuFill(script), OK, "huge pages and several threads")
	want(t, criuFill(f.path("nowhere")), Skip, "cannot read")
}

// runc runs the criu it finds on PATH: the check says whether that is the
// CRIU cryo checked, once $CRYO_CRIU's directory leads PATH.
func TestRuncCRIU(t *testing.T) {
	f := newFixture(t)
	f.mkdir("a")
	f.mkdir("b")
	for _, p := range []string{"a/criu", "b/criu", "b/criu-4.2"} {
		if err := os.WriteFile(f.path(p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=" + f.path("a")}
	want(t, runcCRIU(env, "", f.path("a/criu")), OK, "same CRIU", f.path("a/criu"))
	// CRYO_CRIU=b/criu goes first on runc's PATH.
	want(t, runcCRIU(env, f.path("b/criu"), f.path("b/criu")), OK, "same CRIU")
	// Not named criu: runc cannot be pointed at it.
	want(t, runcCRIU(env, f.path("b/criu-4.2"), f.path("b/criu-4.2")), Warn, "would run "+f.path("a/criu"), "named criu")
	want(t, runcCRIU([]string{"PATH=" + f.path("nowhere")}, "", f.path("a/criu")), Warn, "finds no criu")
}

// runc is needed by the container front ends only: missing, it warns on a
// host without them and fails where Podman or containerd is installed.
// CRYO_RUNC names it explicitly, and a runc on PATH that is cryo itself
// (cryo-runc installed as runc) does not count.
func TestRunc(t *testing.T) {
	f := newFixture(t)
	e := f.env()
	want(t, e.checkRunc(context.Background(), frontEnds{}), Warn, "only process trees")
	want(t, e.checkRunc(context.Background(), frontEnds{podman: "/usr/bin/podman"}), Fail, "containerd and Podman", "apt-get install runc")

	f.link(f.opts.Self, "bin/runc")
	want(t, f.env().checkRunc(context.Background(), frontEnds{}), Warn, "not found on PATH")

	f.opts.Config.Runc = "/usr/sbin/runc"
	want(t, f.env().checkRunc(context.Background(), frontEnds{}), OK, "runc version", "/usr/sbin/runc")
	f.opts.Config.Runc = f.path("nowhere/runc")
	want(t, f.env().checkRunc(context.Background(), frontEnds{}), Warn, "CRYO_RUNC=")
}

// A CPU-only host skips the driver and GPU checks, with the sentence that
// says CPU containers work; the fake driver passes them and lists its GPU.
func TestDriver(t *testing.T) {
	f := newFixture(t)
	cs := f.env().checkDriver(context.Background())
	if len(cs) != 2 {
		t.Fatalf("%+v", cs)
	}
	want(t, cs[0], Skip, noDriver)
	want(t, cs[1], Skip)

	fake, err := fakecuda.Build(filepath.Join(t.TempDir(), "fake"))
	if err != nil {
		t.Fatalf("build the fake driver: %v", err)
	}
	f.opts.Driver = cuda.New(cuda.Options{LibPath: fake.LibCUDA, NVMLPath: fake.LibNVML})
	cs = f.env().checkDriver(context.Background())
	want(t, cs[0], OK, "checkpoint API present")
	want(t, cs[1], OK, "580.")
	if len(cs) < 3 || !strings.HasPrefix(cs[2].Name, "gpu ") {
		t.Fatalf("no GPU listed: %+v", cs)
	}
	want(t, cs[2], OK, "GPU-")
}

func TestDriverBranch(t *testing.T) {
	want(t, driverBranch("560.35.03"), Fail, "≥ 570")
	want(t, driverBranch("575.51.02"), Warn, "≥ 580")
	want(t, driverBranch("580.159.04"), OK)
	want(t, driverBranch("n/a"), Warn, "unknown")
}

// A host with CRIU and runc and nothing else passes: the driver and the
// front ends are skipped, nothing fails, and the summary counts them.
func TestCPUHostPasses(t *testing.T) {
	f := newFixture(t)
	f.real("/usr/sbin/runc")
	r := f.run()
	if r.Failed() {
		t.Fatalf("a CPU-only host failed: %+v", r.Checks)
	}
	for _, name := range []string{"driver", "gpus", "containerd shim", "containerd cri", annotationCheck, "cryo-runc", "podman runtime", "cryo-runc env", "kubernetes"} {
		want(t, only(t, r, name), Skip)
	}
	if r.Summary.Failed != 0 || r.Summary.Skipped != 9 || !strings.HasSuffix(r.Summary.String(), "0 failed") {
		t.Errorf("summary %+v", r.Summary)
	}
}
