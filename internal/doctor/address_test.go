package doctor

import (
	"strings"
	"testing"
)

// Two containerd daemons, one on the default socket and one whose config
// names another: without an address doctor audits both; with one it audits
// only the daemon that listens there (its --address, else its config's
// [grpc] address); an address no daemon listens on is said, with what runs.
func TestContainerdAddress(t *testing.T) {
	f := newFixture(t)
	f.write("proc/42/comm", "containerd\n")
	f.write("proc/42/cmdline", "containerd\x00")
	f.write("proc/43/comm", "containerd\n")
	f.write("proc/43/cmdline", "containerd\x00--config\x00"+f.path("etc/alt.toml")+"\x00")
	f.write("etc/alt.toml", "version = 3\n[grpc]\n  address = \"/run/alt/containerd.sock\"\n")
	f.write("proc/44/comm", "containerd\n")
	f.write("proc/44/cmdline", "containerd\x00-a\x00/run/third.sock\x00")

	pids := func(cs []Check) string {
		var out []string
		for _, c := range cs {
			for _, p := range []string{"pid 42", "pid 43", "pid 44"} {
				if strings.Contains(c.Detail, p) {
					out = append(out, p)
				}
			}
		}
		return strings.Join(out, ",")
	}
	if got := pids(find(f.run(), "containerd shim")); got != "pid 42,pid 43,pid 44" {
		t.Errorf("no address: shim lines about %q, want all three daemons", got)
	}
	for addr, want := range map[string]string{
		"/run/containerd/containerd.sock": "pid 42",
		"unix:///run/alt/containerd.sock": "pid 43",
		"/run/third.sock":                 "pid 44",
	} {
		f.opts.ContainerdAddress = addr
		r := f.run()
		if got := pids(find(r, "containerd shim")); got != want {
			t.Errorf("--address %s: shim lines about %q, want %q", addr, got, want)
		}
		if got := pids(find(r, annotationCheck)); got != want {
			t.Errorf("--address %s: policy lines about %q, want %q", addr, got, want)
		}
	}
	f.opts.ContainerdAddress = "/run/none.sock"
	r := f.run()
	want(t, only(t, r, "containerd shim"), Warn, "no running containerd listens on /run/none.sock", "pid 43 on /run/alt/containerd.sock", "--address")
	want(t, only(t, r, annotationCheck), Warn, "no running containerd listens on /run/none.sock")
}
