package doctor

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda"
)

// fixture is a host in a temporary directory: its own /proc/self/status,
// /sys, PATH, containerd and Podman configuration, env file, and a "cryo"
// binary that the front ends' binaries are compared with. Real programs
// (runc, criu, containerd, podman) are linked into its PATH where a test
// needs them.
type fixture struct {
	t    *testing.T
	dir  string
	opts Options
}

// rootStatus is a /proc/self/status of root with every capability.
const rootStatus = "Name:\tcryo\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, dir: dir}
	f.opts = Options{
		Config: config.Config{CRIU: "/usr/local/sbin/criu"},
		Driver: cuda.New(cuda.Options{LibPath: filepath.Join(dir, "no-driver", "libcuda.so.1")}),
		Self:   filepath.Join(dir, "opt/cryo/cryo"),
		Host: Host{
			Proc: filepath.Join(dir, "proc"), Sys: filepath.Join(dir, "sys"),
			PATH:             filepath.Join(dir, "bin"),
			ShimDirs:         []string{filepath.Join(dir, "usr/local/bin")},
			ContainerdConfig: filepath.Join(dir, "etc/containerd/config.toml"),
			ContainersConf: []string{filepath.Join(dir, "etc/containers/containers.conf"),
				filepath.Join(dir, "etc/containers/containers.conf.d")},
			EnvFile: filepath.Join(dir, "etc/cryo/cryo-runc.env"),
		},
	}
	f.write("proc/self/status", rootStatus)
	f.write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
	f.mkdir("bin")
	f.mkdir("usr/local/bin")
	copyFile(t, "/bin/true", f.opts.Self)
	return f
}

func (f *fixture) path(rel string) string { return filepath.Join(f.dir, rel) }

func (f *fixture) mkdir(rel string) {
	if err := os.MkdirAll(f.path(rel), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) write(rel, content string) string {
	f.t.Helper()
	p := f.path(rel)
	f.mkdir(filepath.Dir(rel))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// link puts target into the fixture at rel as a symlink.
func (f *fixture) link(target, rel string) string {
	f.t.Helper()
	p := f.path(rel)
	f.mkdir(filepath.Dir(rel))
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// real links an installed program into the fixture's PATH, failing with
// the remedy when the host lacks it.
func (f *fixture) real(path string) {
	f.t.Helper()
	if _, err := os.Stat(path); err != nil {
		f.t.Fatalf("%s missing (%v): run `make deps`", path, err)
	}
	f.link(path, filepath.Join("bin", filepath.Base(path)))
}

func (f *fixture) env() *env { return newEnv(f.opts) }

func (f *fixture) run() Report { return Run(context.Background(), f.opts) }

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// find returns the report's checks called name.
func find(r Report, name string) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Name == name {
			out = append(out, c)
		}
	}
	return out
}

// want fails unless c has status s and its detail holds every fragment.
func want(t *testing.T, c Check, s Status, fragments ...string) {
	t.Helper()
	if c.Status != s {
		t.Errorf("%s: status %s, want %s (%s; fix: %s)", c.Name, c.Status, s, c.Detail, c.Fix)
	}
	for _, fr := range fragments {
		if !strings.Contains(c.Detail+" fix: "+c.Fix, fr) {
			t.Errorf("%s: %q lacks %q", c.Name, c.Detail+" fix: "+c.Fix, fr)
		}
	}
}

// only returns the single check called name.
func only(t *testing.T, r Report, name string) Check {
	t.Helper()
	cs := find(r, name)
	if len(cs) != 1 {
		t.Fatalf("%d checks called %q in %+v", len(cs), name, r.Checks)
	}
	return cs[0]
}
