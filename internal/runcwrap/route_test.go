package runcwrap

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/criu"
)

// Which path a command line takes is decided by its command word alone:
// runc's global flags before it (with or without values) never hide it,
// and flags after it, -v and --version included, are the command's.
func TestRoute(t *testing.T) {
	for _, c := range []struct {
		args []string
		want path
	}{
		{[]string{"--version"}, routeVersion},
		{[]string{"-v"}, routeVersion},
		{[]string{"--root", "/r", "--version"}, routeVersion},
		{[]string{"--cryo-env", "/e", "-v"}, routeVersion},
		{[]string{"checkpoint", "--image-path", "/i", "c"}, routeCheckpoint},
		{[]string{"--root", "/r", "--log", "/l", "--log-format", "json", "checkpoint", "c"}, routeCheckpoint},
		{[]string{"--systemd-cgroup", "restore", "-d", "c"}, routeRestore},
		{[]string{"pause", "c"}, routePause},
		{[]string{"resume", "c"}, routeResume},
		{[]string{"delete", "--force", "c"}, routeDelete},
		{[]string{"create", "--bundle", "/b", "c"}, routeCreate},
		{[]string{"run", "-b", "/b", "c"}, routeCreate},
		{[]string{"exec", "-v", "c", "ls"}, routeExec}, // exec's own -v? runc's to refuse
		{[]string{"state", "--version", "c"}, routeExec},
		{[]string{"start", "c"}, routeExec},
		{[]string{"kill", "c", "KILL"}, routeExec},
		{[]string{"ps", "c"}, routeExec},
		{[]string{"features"}, routeExec},
		{[]string{"--root", "/checkpoint", "list"}, routeExec}, // a flag's value is no command
		{[]string{"--log", "restore", "list"}, routeExec},
		{[]string{"--", "checkpoint", "c"}, routeExec}, // after --: no command word cryo reads
		{[]string{"Checkpoint", "c"}, routeExec},
		{nil, routeExec},
	} {
		if got := route(parseCmdline(c.args), c.args); got != c.want {
			t.Errorf("route(%q) = %d, want %d", c.args, got, c.want)
		}
	}
}

// The command line runc gets is the caller's, flag for flag and in order,
// less cryo-runc's own --cryo-env in any of its spellings.
func TestCmdlineToRunc(t *testing.T) {
	for _, c := range []struct {
		args     []string
		command  string
		envFile  string
		argv     []string
		rootFlag string
	}{
		{[]string{"--cryo-env=/e", "list"}, "list", "/e", []string{"list"}, ""},
		{[]string{"--cryo-env", "/e", "--root", "/r", "list"}, "list", "/e", []string{"--root", "/r", "list"}, "/r"},
		{[]string{"-cryo-env", "/e", "-root=/r", "list"}, "list", "/e", []string{"-root=/r", "list"}, "/r"},
		{[]string{"--root", "/a", "--root=/b", "state", "c"}, "state", "", []string{"--root", "/a", "--root=/b", "state", "c"}, "/b"},
		{[]string{"--debug", "--rootless", "true", "delete", "c"}, "delete", "", []string{"--debug", "--rootless", "true", "delete", "c"}, ""},
		{[]string{"--cryo-env"}, "", "", nil, ""},
		{[]string{"-", "x"}, "-", "", []string{"-", "x"}, ""},
		{[]string{"--root", "/r", "--", "list"}, "", "", []string{"--root", "/r", "--", "list"}, "/r"},
		{[]string{"checkpoint", "--cryo-env=/e", "c"}, "checkpoint", "", []string{"checkpoint", "--cryo-env=/e", "c"}, ""},
	} {
		cl := parseCmdline(c.args)
		if cl.command != c.command || cl.envFile != c.envFile {
			t.Errorf("parseCmdline(%q): command %q env %q, want %q %q", c.args, cl.command, cl.envFile, c.command, c.envFile)
		}
		if got := cl.argv(); !reflect.DeepEqual(got, c.argv) && !(len(got) == 0 && len(c.argv) == 0) {
			t.Errorf("parseCmdline(%q).argv() = %q, want %q", c.args, got, c.argv)
		}
		if got := cl.globalValue("root"); got != c.rootFlag {
			t.Errorf("parseCmdline(%q): --root %q, want %q", c.args, got, c.rootFlag)
		}
	}
}

// The options of checkpoint and restore cryo acts on, in runc's spellings
// (one or two dashes, =value or a separate value, --flag=false), and the
// container id, never taken from an option's value.
func TestParseCROptsTable(t *testing.T) {
	wd := absPath(".", ".")
	for _, c := range []struct {
		rest []string
		want crOpts
	}{
		{[]string{"c"}, crOpts{id: "c", imagePath: wd + "/checkpoint", bundle: wd}},
		{[]string{"--image-path", "img", "c"}, crOpts{id: "c", imagePath: wd + "/img", bundle: wd}},
		{[]string{"--image-path=/i", "--work-path", "/w", "--leave-running", "c"},
			crOpts{id: "c", imagePath: "/i", workPath: "/w", bundle: wd, leaveRunning: true}},
		{[]string{"-image-path", "/i", "--leave-running=false", "c"}, crOpts{id: "c", imagePath: "/i", bundle: wd}},
		{[]string{"--leave-running=1", "--tcp-established", "--pre-dump", "c"},
			crOpts{id: "c", imagePath: wd + "/checkpoint", bundle: wd, leaveRunning: true, tcp: true, preDump: true}},
		{[]string{"-d", "-b", "/b", "--pid-file", "p", "--console-socket", "/s", "c"},
			crOpts{id: "c", imagePath: wd + "/checkpoint", bundle: "/b", detach: true}},
		{[]string{"--detach=true", "--bundle=rel", "--status-fd", "3", "c"},
			crOpts{id: "c", imagePath: wd + "/checkpoint", bundle: wd + "/rel", detach: true}},
		{[]string{"--manage-cgroups-mode", "soft", "--empty-ns", "network", "c"}, crOpts{id: "c", imagePath: wd + "/checkpoint", bundle: wd}},
		{[]string{"--page-server", "10.0.0.1:27", "--parent-path", "../p", "c"}, crOpts{id: "c", imagePath: wd + "/checkpoint", bundle: wd}},
		{[]string{"--brand-new", "c"}, crOpts{id: "c", imagePath: wd + "/checkpoint", bundle: wd}},
		{[]string{"--", "-odd-id"}, crOpts{id: "-odd-id", imagePath: wd + "/checkpoint", bundle: wd}},
		{[]string{"-h"}, crOpts{imagePath: wd + "/checkpoint", bundle: wd, help: true}},
		{[]string{"--help=false", "c"}, crOpts{id: "c", imagePath: wd + "/checkpoint", bundle: wd}},
		{[]string{"a", "b"}, crOpts{id: "b", imagePath: wd + "/checkpoint", bundle: wd}},
		{[]string{"--image-path"}, crOpts{imagePath: wd + "/checkpoint", bundle: wd}},
	} {
		if got := parseCROpts(c.rest); got != c.want {
			t.Errorf("parseCROpts(%q) =\n  %+v, want\n  %+v", c.rest, got, c.want)
		}
	}
}

// The container id of create, run and restore, where prepare writes the
// action script: the last argument that is no option's value.
func TestLastPositional(t *testing.T) {
	for _, c := range []struct {
		args   []string
		values map[string]bool
		want   string
	}{
		{[]string{"--bundle", "/b", "c"}, createValueFlags, "c"},
		{[]string{"-b", "/b", "--preserve-fds", "2", "--no-pivot", "c"}, createValueFlags, "c"},
		{[]string{"--bundle=/b", "c", "--console-socket", "/s"}, createValueFlags, "c"},
		{[]string{"--image-path", "/i", "--work-path", "/w", "-d", "c"}, crValueFlags, "c"},
		{[]string{"--pid-file", "p"}, createValueFlags, ""},
		{[]string{"--bundle", "/b"}, crValueFlags, ""},
	} {
		if got := lastPositional(c.args, c.values); got != c.want {
			t.Errorf("lastPositional(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// runc's queries (state, ps) about the container use the wrapped
// command's global flags less the log ones, whose files are the caller's.
func TestQueriesLeaveTheLogAlone(t *testing.T) {
	r := runcCLI{globals: []string{"--root", "/r", "--log", "/l", "--log-format=json", "--systemd-cgroup", "--log=/m", "-log-format", "text"}}
	if got, want := r.quiet(), []string{"--root", "/r", "--systemd-cgroup"}; !reflect.DeepEqual(got, want) {
		t.Errorf("quiet() = %q, want %q", got, want)
	}
}

func TestPauseID(t *testing.T) {
	for _, c := range []struct {
		rest []string
		want string
	}{{[]string{"c"}, "c"}, {[]string{"-h"}, ""}, {[]string{"--help", "c"}, ""}, {[]string{"a", "b"}, ""}, {nil, ""}} {
		if got := pauseID(c.rest); got != c.want {
			t.Errorf("pauseID(%q) = %q, want %q", c.rest, got, c.want)
		}
	}
}

// With CRYO_CRIU_HOOKS=1, create, run and restore write the action
// script into the bundle their flags name (--bundle, -b, --bundle=, or
// the working directory), carrying the container id, and point
// config.json's CRIU configuration at it; without it nothing is written.
func TestPrepareWritesTheActionScript(t *testing.T) {
	for _, c := range []struct {
		hooks bool
		args  func(bundle string) []string
		id    string
	}{
		{true, func(b string) []string {
			return []string{"--root", "/r", "create", "--bundle", b, "--pid-file", "p", "c1"}
		}, "c1"},
		{true, func(b string) []string { return []string{"run", "-b", b, "-d", "c2"} }, "c2"},
		{true, func(b string) []string { return []string{"restore", "--image-path", "/i", "--bundle=" + b, "c3"} }, "c3"},
		{false, func(b string) []string { return []string{"create", "--bundle", b, "c4"} }, ""},
	} {
		bundle := t.TempDir()
		spec := filepath.Join(bundle, "config.json")
		if err := os.WriteFile(spec, []byte(`{"ociVersion":"1.0.2","process":{"args":["sleep","1"]},"root":{"path":"rootfs"}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		w := &wrapper{cmd: parseCmdline(c.args(bundle)), log: &logger{w: &logs},
			cfg: config.Config{CRIUHooks: c.hooks, CRIUAction: "/opt/cryo/bin/cryo-criu-action"}}
		w.prepare()
		script, err := os.ReadFile(filepath.Join(bundle, "cryo-criu-action.sh"))
		data, _ := os.ReadFile(spec)
		if !c.hooks {
			if err == nil || strings.Contains(string(data), criu.ConfigAnnotation) {
				t.Errorf("%q without CRYO_CRIU_HOOKS: script %q, config.json %s; want neither touched", c.args(bundle), script, data)
			}
			continue
		}
		if err != nil || !strings.Contains(string(script), "CRYO_CONTAINER_ID='"+c.id+"'") ||
			!strings.Contains(string(script), "exec '/opt/cryo/bin/cryo-criu-action'") {
			t.Errorf("%q: script %q (%v), logs %s", c.args(bundle), script, err, logs.String())
		}
		if !strings.Contains(string(data), criu.ConfigAnnotation) {
			t.Errorf("%q: config.json names no CRIU configuration: %s", c.args(bundle), data)
		}
	}
}
