package inspect

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/criuimg"
)

// tinyDir is a real CRIU dump of a small program, criuimg's test data.
const tinyDir = "../../criuimg/testdata/tiny"

func readTiny(t *testing.T) *criuimg.Details {
	t.Helper()
	d, err := criuimg.Read(tinyDir, criuimg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRender(t *testing.T) {
	var b bytes.Buffer
	if err := Render(&b, readTiny(t)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"└── 21088  ./tiny --listen 47311 \"two words\"",
		"    └── 21091  [tiny]",
		"TCP 127.0.0.1:47311 (LISTEN)",
		"/tmp/criuinfo/held.txt",
		"/mnt         tmpfs",
		"pages scanned 16, written 10",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
}

func TestRenderEscapesControl(t *testing.T) {
	d := &criuimg.Details{Processes: []criuimg.Process{{PID: 1, Comm: "x", Cmdline: []string{"evil\x1b]0;title\x07", "\x9b2J"},
		Files: []criuimg.File{{FD: 3, Type: "REG", Path: "/tmp/a\rb\xff"}}}},
		Mounts: []criuimg.Mount{{MountPoint: "/m\x1b[31m", FSType: "tmpfs"}}}
	var b bytes.Buffer
	if err := Render(&b, d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\r\u009b") || strings.Contains(out, "\xff") {
		t.Fatalf("render passed control characters through: %q", out)
	}
	for _, want := range []string{`\x1b]0;title\a`, `\x9b2J`, `/tmp/a\rb\xff`, `/m\x1b[31m`} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q: %q", want, out)
		}
	}
}

// RenderSections writes only what is asked: the environment and decoded
// sockets on request, one process with PID.
func TestRenderSections(t *testing.T) {
	d := &criuimg.Details{Processes: []criuimg.Process{
		{PID: 1, PPID: 0, Comm: "init", Env: []string{"A=1"}, Files: []criuimg.File{{FD: 3, Type: "REG", Path: "/held"}},
			Sockets: []criuimg.Socket{{FD: 4, Family: "IPv4", Protocol: "TCP", State: "LISTEN", Src: "0.0.0.0", SrcPort: 80}}},
		{PID: 2, PPID: 1, Comm: "child"},
	}, Mounts: []criuimg.Mount{{MountPoint: "/data", FSType: "unsupported", Source: "/dev/vda", HostSource: "/srv/data"}}}
	render := func(s Sections) string {
		var b strings.Builder
		if err := RenderSections(&b, d, s); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	all := render(Sections{Tree: true, Files: true, Sockets: true, Env: true, Mounts: true})
	for _, want := range []string{"A=1", "/held", "TCP 0.0.0.0:80 (LISTEN)", "2  [child]", "/data", "bind", "/srv/data"} {
		if !strings.Contains(all, want) {
			t.Errorf("all sections lack %q:\n%s", want, all)
		}
	}
	if s := render(Sections{Mounts: true}); strings.Contains(s, "Process tree") || !strings.Contains(s, "/srv/data") {
		t.Errorf("mounts alone:\n%s", s)
	}
	if s := render(Sections{Tree: true, PID: 2}); strings.Contains(s, "[init]") || !strings.Contains(s, "[child]") {
		t.Errorf("--pid 2:\n%s", s)
	}
	if s := render(DefaultSections()); strings.Contains(s, "A=1") || strings.Contains(s, "sockets") {
		t.Errorf("the default sections show the environment or decoded sockets:\n%s", s)
	}
}
