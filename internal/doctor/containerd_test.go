package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/version"
)

const (
	cri2 = `version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.cryo]
  runtime_type = 'io.containerd.cryo.v2'
  pod_annotations = ['cryo.io/*']
`
	cri17 = `version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.cryo]
  runtime_type = "io.containerd.cryo.v2"
  pod_annotations = ["cryo.io/*"]
`
)

// A running containerd is found in /proc with its binary, its --config
// and its PATH; other processes are not.
func TestFindDaemons(t *testing.T) {
	f := newFixture(t)
	f.write("proc/42/comm", "containerd\n")
	f.link("/opt/cryo-deps/containerd-2/usr/bin/containerd", "proc/42/exe")
	f.write("proc/42/cmdline", "/opt/cryo-deps/containerd-2/usr/bin/containerd\x00--config\x00/tmp/c.toml\x00")
	f.write("proc/42/environ", "HOME=/root\x00PATH=/opt/x/bin:/usr/bin\x00")
	f.write("proc/7/comm", "containerd-shim\n")
	f.write("proc/9/comm", "containerd\n")
	f.write("proc/9/cmdline", "containerd\x00-c=/etc/other.toml\x00")
	ds := findDaemons(f.opts.Host.Proc, "/etc/containerd/config.toml")
	if len(ds) != 2 {
		t.Fatalf("daemons %+v", ds)
	}
	if d := ds[1]; d.pid != 42 || d.exe != "/opt/cryo-deps/containerd-2/usr/bin/containerd" || d.config != "/tmp/c.toml" || d.path != "/opt/x/bin:/usr/bin" || !d.pathKnown {
		t.Errorf("daemon %+v", d)
	}
	if d := ds[0]; d.config != "/etc/other.toml" || d.pathKnown {
		t.Errorf("daemon with an unreadable environment: %+v", d)
	}
}

// No containerd, running or installed: both lines skip.
func TestContainerdAbsent(t *testing.T) {
	f := newFixture(t)
	cs := f.env().checkContainerd(context.Background(), containerdHost{})
	want(t, cs[0], Skip, "not installed")
	want(t, cs[1], Skip, "not installed")
}

// The shim containerd would start: on its PATH and this cryo (a symlink or
// a copy) is ok; next to its binary counts too; one outside its PATH, or
// another build, warns with the link to make.
func TestShim(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	d := daemon{pid: 42, exe: f.path("ctrd/bin/containerd"), path: f.path("ctrd/path"), pathKnown: true}
	f.mkdir("ctrd/path")

	want(t, f.env().checkShim(ctx, d, true), Warn, "not found by containerd (pid 42)", "ln -s "+f.opts.Self)

	f.link(f.opts.Self, "usr/local/bin/"+shimBinary)
	want(t, f.env().checkShim(ctx, d, true), Warn, "is not on containerd's PATH", filepath.Join(f.path("ctrd/bin"), shimBinary))

	f.link(f.opts.Self, "ctrd/bin/"+shimBinary)
	want(t, f.env().checkShim(ctx, d, true), OK, "this cryo")

	copyFile(t, f.opts.Self, f.path("ctrd/path/"+shimBinary))
	want(t, f.env().checkShim(ctx, d, true), OK, f.path("ctrd/path/"+shimBinary), "a copy of this cryo")

	os.Remove(f.path("ctrd/path/" + shimBinary))
	copyFile(t, "/bin/false", f.path("ctrd/path/"+shimBinary))
	want(t, f.env().checkShim(ctx, d, true), Warn, "another build", "ln -sf "+f.opts.Self)
}

// A shim that is another file but answers -v with this version is cryo's.
func TestShimVersion(t *testing.T) {
	f := newFixture(t)
	old := version.Version
	version.Version = "v9.8.7"
	t.Cleanup(func() { version.Version = old })
	f.write("ctrd/path/"+shimBinary, "#!/bin/sh\nprintf '%s:\\n  Version:  v9.8.7\\n' \"$0\"\n")
	os.Chmod(f.path("ctrd/path/"+shimBinary), 0o755)
	d := daemon{exe: f.path("ctrd/bin/containerd"), path: f.path("ctrd/path"), pathKnown: true}
	want(t, f.env().checkShim(context.Background(), d, true), OK, "cryo v9.8.7")
	version.Version = "v9.9.0"
	want(t, f.env().checkShim(context.Background(), d, true), Warn, "Version: v9.8.7", "not this cryo v9.9.0")
}

// The CRI runtime entry, read from the file when containerd's binary is
// not at hand: present for 1.7 and 2.x, absent, without cryo.io/* in
// pod_annotations, with a runtime_path that is missing, with no shim to
// start, and with CRI disabled.
func TestCRIFile(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.link(f.opts.Self, "bin/"+shimBinary)
	d := daemon{config: f.opts.Host.ContainerdConfig}
	check := func() Check { return f.env().checkCRI(ctx, d, false) }

	want(t, check(), Warn, "no CRI runtime of type io.containerd.cryo.v2", "containerd 2.x runtime from contrib/kubernetes/containerd-cri.toml")
	f.write("etc/containerd/config.toml", cri2)
	want(t, check(), OK, `runtime handler "cryo"`, "cryo.io/*")
	f.write("etc/containerd/config.toml", cri17)
	want(t, check(), OK, `runtime handler "cryo"`)
	f.write("etc/containerd/config.toml", strings.Replace(cri17, `"cryo.io/*"`, `"io.kubernetes.cri.*"`, 1))
	want(t, check(), Warn, "do not pass cryo.io/checkpoint-image", `pod_annotations = ["cryo.io/*"]`)
	// containerd matches with path.Match, whose * stops at a slash.
	f.write("etc/containerd/config.toml", strings.Replace(cri2, "'cryo.io/*'", "'*'", 1))
	want(t, check(), Warn, "do not pass cryo.io/checkpoint-image")
	f.write("etc/containerd/config.toml", strings.Replace(cri2, "'cryo.io/*'", "'cryo.io/checkpoint-image*', 'cryo.io/on-restore-failure*'", 1))
	want(t, check(), OK)
	f.write("etc/containerd/config.toml", cri2+"  runtime_path = '"+f.path("nowhere/shim")+"'\n")
	want(t, check(), Fail, "runtime_path", "is not an executable file")
	f.write("etc/containerd/config.toml", strings.Replace(cri17, "version = 2", "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]", 1))
	want(t, check(), Skip, "CRI plugin is disabled")
	f.write("etc/containerd/config.toml", "version = 3\n[plugins\n")
	want(t, check(), Warn, "config dump")

	f.write("etc/containerd/config.toml", cri2)
	os.Remove(f.path("bin/" + shimBinary))
	want(t, check(), Fail, "containerd finds no "+shimBinary)
}

// containerd's own `config dump` is what counts where its binary is: 2.x
// migrates a version 2 file (the 1.7 snippet) to the 2.x plugin, and 1.7
// reads its own.
func TestCRIConfigDump(t *testing.T) {
	for _, c := range []struct{ dir, file string }{{"containerd-2", cri17}, {"containerd-2", cri2}, {"containerd-1.7", cri17}} {
		bin := filepath.Join("/opt/cryo-deps", c.dir, "usr/bin/containerd")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s missing (%v): run `make deps`", bin, err)
		}
		f := newFixture(t)
		f.link(f.opts.Self, "bin/"+shimBinary)
		f.write("etc/containerd/config.toml", c.file)
		d := daemon{exe: bin, config: f.opts.Host.ContainerdConfig}
		want(t, f.env().checkCRI(context.Background(), d, false), OK, "config dump", `runtime handler "cryo"`)
	}
}

// containerd installed but not running: the shim is looked up on this PATH
// and in the install directories, the config file is the default one.
func TestContainerdInstalled(t *testing.T) {
	f := newFixture(t)
	f.real("/opt/cryo-deps/containerd-2/usr/bin/containerd")
	f.link(f.opts.Self, "usr/local/bin/"+shimBinary)
	f.write("etc/containerd/config.toml", cri2)
	r := f.run()
	want(t, only(t, r, "containerd shim"), OK, "not running", "this cryo")
	want(t, only(t, r, "containerd cri"), OK, `runtime handler "cryo"`)
}
