package doctor

import (
	"os"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
)

// The annotation restore line reads the policy file that the running
// containerd's environment names: unset is off (ok), a valid one is on
// (ok, with its namespaces), one that lets a namespace use the node's
// credentials warns, an unusable one fails; without containerd it skips.
func TestAnnotationRestore(t *testing.T) {
	f := newFixture(t)
	want(t, f.env().checkAnnotationRestore(containerdHost{})[0], Skip, "not installed")

	anonymous := f.write("etc/cryo/anonymous.json", `{"enabled": true, "namespaces": {"team-a": {"repositories": ["reg.example/team-a/"]}}, "insecure_registries": ["127.0.0.1:5000"]}`)
	borrowed := f.write("etc/cryo/borrowed.json", `{"enabled": true, "namespaces": {"team-b": {"repositories": ["reg.example/team-b"], "use_node_credentials": true}}}`)
	disabled := f.write("etc/cryo/disabled.json", `{"enabled": false, "namespaces": {"team-a": {"repositories": ["reg.example/team-a/"]}}}`)
	broken := f.write("etc/cryo/broken.json", `{"enabled": true, "namespaces": {"team-a": {"repositories": ["https://reg.example/team-a"]}}}`)
	for _, p := range []string{anonymous, borrowed, disabled, broken} {
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		environ   string
		status    Status
		fragments []string
	}{
		{"PATH=/usr/bin\x00", OK, []string{"containerd (pid 42)", "off", config.EnvAnnotationRestore + " is unset", "refused"}},
		{config.EnvAnnotationRestore + "=" + disabled + "\x00", OK, []string{"off", `"enabled": true`}},
		{config.EnvAnnotationRestore + "=" + anonymous + "\x00", OK, []string{"on (" + anonymous, `"team-a" → reg.example/team-a/`, "plain HTTP to 127.0.0.1:5000", "anonymous pulls"}},
		{config.EnvAnnotationRestore + "=" + borrowed + "\x00", Warn, []string{`"team-b" pull with the node's registry credentials`, "use_node_credentials to false"}},
		{config.EnvAnnotationRestore + "=" + broken + "\x00", Fail, []string{"has a scheme", "refused", "unset " + config.EnvAnnotationRestore}},
	} {
		f.write("proc/42/environ", c.environ)
		d := daemon{pid: 42}
		cs := f.env().checkAnnotationRestore(containerdHost{daemons: []daemon{d}})
		if len(cs) != 1 {
			t.Fatalf("%d checks for one daemon", len(cs))
		}
		want(t, cs[0], c.status, c.fragments...)
	}

	// Installed, not running: this environment stands in for containerd's.
	f.opts.Config.AnnotationRestore = borrowed
	cs := f.env().checkAnnotationRestore(containerdHost{binary: "/usr/bin/containerd"})
	want(t, cs[0], Warn, "not running", "team-b")
}
