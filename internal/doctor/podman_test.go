package doctor

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

const podmanConf = `[engine]
runtime_supports_json = ["crun", "runc", "cryo"]

[engine.runtimes]
cryo = [
  "%s",
]
`

// Podman installed: cryo-runc on PATH, and a containers.conf entry whose
// first existing path is this cryo. Missing entry warns; an entry whose
// paths all miss fails (every container naming it would); a drop-in file
// counts, and a later file overrides an earlier one.
func TestPodman(t *testing.T) {
	f := newFixture(t)
	f.real("/usr/bin/podman")
	ctx := context.Background()
	check := func() Check { return f.env().checkPodmanRuntime(ctx) }

	want(t, f.env().checkWrapper(ctx), Warn, "not on PATH", "ln -s "+f.opts.Self+" /usr/local/bin/cryo-runc")
	f.link(f.opts.Self, "bin/cryo-runc")
	// Podman takes a runtime's name from containers.conf or a full path,
	// never a bare name from PATH: doctor suggests only what works.
	wantNot(t, f.env().checkWrapper(ctx), "`podman --runtime cryo-runc`")
	want(t, f.env().checkWrapper(ctx), OK, "this cryo", "`podman --runtime "+f.path("bin/cryo-runc")+"`")

	want(t, check(), Warn, "no [engine.runtimes] entry for cryo-runc", "only `podman --runtime "+f.path("bin/cryo-runc")+"` works", "containers.conf.d/cryo.conf, then use `podman --runtime cryo`")
	wantNot(t, check(), "`podman --runtime cryo-runc`")
	f.write("etc/containers/containers.conf", "[engine]\nruntime = \"cryo\"\n[engine.runtimes]\ncryo = [\""+f.path("nowhere/cryo-runc")+"\"]\n")
	want(t, check(), Fail, `runtime "cryo"`, "podman --runtime cryo` fails")

	f.write("etc/containers/containers.conf.d/cryo.conf", sprintf(podmanConf, f.path("bin/cryo-runc")))
	want(t, check(), OK, "cryo.conf", "Podman's default runtime", "this cryo", "`podman --runtime cryo`")

	copyFile(t, "/bin/false", f.path("other/cryo-runc"))
	f.write("etc/containers/containers.conf.d/zz.conf", sprintf(podmanConf, f.path("other/cryo-runc")))
	want(t, check(), Warn, "zz.conf", "another build", "ln -sf "+f.opts.Self)

	f.write("etc/containers/containers.conf.d/zz.conf", "[engine\n")
	want(t, check(), OK, "cryo.conf")

	r := f.run()
	want(t, only(t, r, "cryo-runc"), OK)
	want(t, only(t, r, "podman runtime"), OK)
	want(t, only(t, r, "cryo-runc env"), OK, "no "+f.opts.Host.EnvFile)
}

// cryo-runc's environment file: absent is fine; one it cannot parse, or a
// CRYO_RUNC that does not exist, fails (cryo-runc refuses every call then);
// a bad duration or a missing library path warns; a good one lists what it
// sets.
func TestEnvFile(t *testing.T) {
	f := newFixture(t)
	check := func() Check { return f.env().checkEnvFile(true) }
	want(t, check(), OK, "no ")
	want(t, f.env().checkEnvFile(false), Skip)

	f.write("etc/cryo/cryo-runc.env", "CRYO_RUNC=/usr/sbin/runc\njust words\n")
	want(t, check(), Fail, "cryo-runc.env:2", "refuses every call")
	want(t, f.env().checkEnvFile(false), Fail, "cryo-runc.env:2")

	f.write("etc/cryo/cryo-runc.env", "CRYO_RUNC="+f.path("nowhere/runc")+"\n")
	want(t, check(), Fail, "CRYO_RUNC=", "runc's absolute path")

	f.write("etc/cryo/cryo-runc.env", "CRYO_RUNC=/usr/sbin/runc\nCRYO_COPY_TIMEOUT=soon\nexport CRYO_LIBCUDA=\""+f.path("nowhere/libcuda.so.1")+"\"\n")
	want(t, check(), Warn, "CRYO_COPY_TIMEOUT=\"soon\"", "CRYO_LIBCUDA=", "does not exist")

	f.write("etc/cryo/cryo-runc.env", "# settings\nCRYO_RUNC=/usr/sbin/runc\nCRYO_CRIU_HOOKS=1\n")
	want(t, check(), OK, "sets CRYO_RUNC, CRYO_CRIU_HOOKS")
}

// Podman's own files are read from their default places, the user's only
// for a user other than root, and $CONTAINERS_CONF alone when set.
func TestPodmanConfFiles(t *testing.T) {
	f := newFixture(t)
	got := podmanConfFiles([]string{"HOME=/home/u"}, f.opts.Host.Proc)
	if len(got) != 4 || got[2] != "/etc/containers/containers.conf" {
		t.Errorf("root's files %q", got)
	}
	f.write("proc/self/status", "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0\n")
	got = podmanConfFiles([]string{"HOME=/home/u"}, f.opts.Host.Proc)
	if len(got) != 6 || got[4] != "/home/u/.config/containers/containers.conf" {
		t.Errorf("a user's files %q", got)
	}
	got = podmanConfFiles([]string{"CONTAINERS_CONF=/x.conf"}, f.opts.Host.Proc)
	if len(got) != 1 || got[0] != "/x.conf" {
		t.Errorf("CONTAINERS_CONF: %q", got)
	}
}

func sprintf(format string, a ...any) string { return fmt.Sprintf(format, a...) }

// wantNot fails when c says fragment, in its detail or its fix.
func wantNot(t *testing.T, c Check, fragment string) {
	t.Helper()
	if strings.Contains(c.Detail+" fix: "+c.Fix, fragment) {
		t.Errorf("%s: %q says %q", c.Name, c.Detail+" fix: "+c.Fix, fragment)
	}
}
