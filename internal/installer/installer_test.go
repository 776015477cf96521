package installer

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// host is a node's files under a temporary directory, reached with
// HostRoot "/" (no chroot): containerd's configuration, a prefix that
// already holds a file of someone else's, and a "containerd" that is a
// socket the restart command makes anew, as a restarted containerd does.
type host struct {
	t        *testing.T
	dir      string
	o        Options
	restarts atomic.Int32
}

func newHost(t *testing.T, config string) *host {
	t.Helper()
	dir := t.TempDir()
	h := &host{t: t, dir: dir}
	src := filepath.Join(dir, "image")
	write(t, filepath.Join(src, "bin", "cryo"), "cryo binary v1", 0o755)
	write(t, filepath.Join(dir, "usr/local/bin/other-tool"), "not cryo's", 0o755)
	if config != "" {
		write(t, filepath.Join(dir, "etc/containerd/config.toml"), config, 0o640)
	}
	marker := filepath.Join(dir, "restart.request")
	h.o = Options{HostRoot: "/", Source: src, Prefix: filepath.Join(dir, "usr/local"),
		ContainerdConfig: filepath.Join(dir, "etc/containerd/config.toml"),
		DropIn:           filepath.Join(dir, "etc/containerd/conf.d/cryo.toml"),
		StateDir:         filepath.Join(dir, "var/lib/cryo/node-install"),
		Socket:           filepath.Join(dir, "c.sock"),
		Restart:          []string{"/bin/sh", "-c", "touch " + marker}}
	h.serve(marker)
	return h
}

// serve listens on the socket and, on each restart request, listens anew.
func (h *host) serve(marker string) {
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	l, err := net.Listen("unix", h.o.Socket)
	if err != nil {
		h.t.Fatal(err)
	}
	go func() {
		defer func() { l.Close() }()
		for ctx.Err() == nil {
			if _, err := os.Stat(marker); err == nil {
				l.Close()
				_ = os.Remove(h.o.Socket)
				if l, err = net.Listen("unix", h.o.Socket); err != nil {
					return
				}
				_ = os.Remove(marker)
				h.restarts.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

func write(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// tree is every path under the host's directory but the image, the
// socket and the restart marker, with its mode and content or target.
func (h *host) tree() map[string]string {
	out := map[string]string{}
	_ = filepath.Walk(h.dir, func(p string, fi os.FileInfo, err error) error {
		rel, _ := filepath.Rel(h.dir, p)
		if err != nil || rel == "." || strings.HasPrefix(rel, "image") || rel == "c.sock" {
			return err
		}
		v := fi.Mode().String()
		if fi.Mode()&os.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			v += " -> " + l
		} else if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	return out
}

func same(t *testing.T, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: %q, was %q", k, after[k], v)
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s left behind: %q", k, v)
		}
	}
}

const configV3 = `# the node's own
version = 3
root = "/var/lib/containerd"

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
`

func TestInstallUninstallV3(t *testing.T) {
	h := newHost(t, configV3)
	before := h.tree()
	ctx := context.Background()
	res, err := Install(ctx, h.o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || h.restarts.Load() != 1 {
		t.Fatalf("first install: changed %v, %d restart(s); want a change and 1", res.Changed, h.restarts.Load())
	}
	cfg, _ := os.ReadFile(h.o.ContainerdConfig)
	want := strings.Replace(configV3, "version = 3\n", "version = 3\nimports = [\""+h.o.DropIn+"\"]\n", 1)
	if string(cfg) != want {
		t.Errorf("config.toml:\n%s\nwant:\n%s", cfg, want)
	}
	drop, _ := os.ReadFile(h.o.DropIn)
	if !bytes.Contains(drop, []byte("[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.cryo]")) ||
		!bytes.Contains(drop, []byte("runtime_path = '"+h.o.shimPath()+"'")) || !bytes.Contains(drop, []byte("enable_cdi = true")) {
		t.Errorf("drop-in:\n%s", drop)
	}
	for _, n := range Names {
		if l, err := os.Readlink(filepath.Join(h.o.Prefix, "bin", n)); err != nil || l != "cryo" {
			t.Errorf("%s: %q %v", n, l, err)
		}
	}
	// A restarted pod installs again: nothing changes, no restart.
	if res, err := Install(ctx, h.o); err != nil || res.Changed || len(res.Files) != 0 {
		t.Fatalf("second install: %+v %v; want no change", res, err)
	}
	// An upgrade brings a new binary: it is replaced, containerd is not
	// restarted, and uninstall still restores the host as it was.
	write(t, filepath.Join(h.o.Source, "bin", "cryo"), "cryo binary v2", 0o755)
	if res, err := Install(ctx, h.o); err != nil || res.Changed || len(res.Files) != 1 {
		t.Fatalf("upgrade: %+v %v; want one file, no restart", res, err)
	}
	res, err = Uninstall(ctx, h.o)
	if err != nil || !res.Changed || h.restarts.Load() != 2 {
		t.Fatalf("uninstall: %+v %v, %d restarts", res, err, h.restarts.Load())
	}
	same(t, before, h.tree())
}

func TestInstallV2ExistingImports(t *testing.T) {
	cfg := "version = 2\nimports = [\n  \"/etc/containerd/other.toml\",\n]\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause\"\n"
	h := newHost(t, cfg)
	before := h.tree()
	if _, err := Install(context.Background(), h.o); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(h.o.ContainerdConfig)
	want := strings.Replace(cfg, "imports = [", "imports = [\""+h.o.DropIn+"\", ", 1)
	if string(got) != want {
		t.Errorf("config.toml:\n%s\nwant:\n%s", got, want)
	}
	drop, _ := os.ReadFile(h.o.DropIn)
	// containerd 1.7 replaces a plugin's table with an imported one: the
	// drop-in carries the node's own CRI settings along with cryo's.
	for _, want := range []string{"version = 2", "[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.cryo]", "sandbox_image = 'pause'", "enable_cdi = true"} {
		if !bytes.Contains(drop, []byte(want)) {
			t.Errorf("drop-in for containerd 1.7 lacks %q:\n%s", want, drop)
		}
	}
	if _, err := Uninstall(context.Background(), h.o); err != nil {
		t.Fatal(err)
	}
	same(t, before, h.tree())
}

// An imports glob that already covers the drop-in leaves config.toml alone.
func TestInstallImportGlob(t *testing.T) {
	h := newHost(t, "")
	cfg := "version = 3\nimports = [\"conf.d/*.toml\"]\n"
	write(t, h.o.ContainerdConfig, cfg, 0o644)
	if _, err := Install(context.Background(), h.o); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(h.o.ContainerdConfig); string(got) != cfg {
		t.Errorf("config.toml changed:\n%s", got)
	}
}

// A configuration of schema 1 is refused before anything is written.
func TestInstallRefusesSchema1(t *testing.T) {
	h := newHost(t, "[plugins.cri]\n  sandbox_image = \"pause\"\n")
	before := h.tree()
	_, err := Install(context.Background(), h.o)
	var ie *Error
	if !errorsAs(err, &ie) || ie.Step != "containerd config" {
		t.Fatalf("install on schema 1: %v; want a containerd config error", err)
	}
	after := h.tree()
	delete(after, "usr/local/bin/cryo") // copied before the configuration is read
	for _, n := range Names {
		delete(after, "usr/local/bin/"+n)
	}
	delete(after, "var")
	delete(after, "var/lib")
	delete(after, "var/lib/cryo")
	delete(after, "var/lib/cryo/node-install")
	delete(after, "var/lib/cryo/node-install/record.json")
	same(t, before, after)
	if _, err := Uninstall(context.Background(), h.o); err != nil {
		t.Fatal(err)
	}
	same(t, before, h.tree())
}

func errorsAs(err error, target **Error) bool { return errors.As(err, target) }

// A plain file where the drop-in's directory must be (a real ENOTDIR):
// the install fails at the record step, names the path and the remedy
// that fits, and does not restart containerd; once the file is gone, the
// same install succeeds.
func TestInstallDropInDirIsAFile(t *testing.T) {
	h := newHost(t, "version = 3\n")
	confd := filepath.Dir(h.o.DropIn)
	write(t, confd, "not a directory\n", 0o644)
	_, err := Install(context.Background(), h.o)
	var ie *Error
	if !errors.As(err, &ie) || ie.Step != "record" || ie.Target != h.o.DropIn || !strings.Contains(ie.Remedy, "move aside the file") {
		t.Fatalf("install with %s a file: %v, want the record step's error for %s with its remedy", confd, err, h.o.DropIn)
	}
	if h.restarts.Load() != 0 {
		t.Errorf("containerd restarted %d times by a failed install", h.restarts.Load())
	}
	if err := os.Remove(confd); err != nil {
		t.Fatal(err)
	}
	if res, err := Install(context.Background(), h.o); err != nil || !res.Changed || h.restarts.Load() != 1 {
		t.Fatalf("install once the file is gone: %+v, %v, %d restart(s); want a change and 1", res, err, h.restarts.Load())
	}
}

// With --wait, a failed install is tried again every --retry: the same
// cause is logged as failing again (one event per cause, not one per
// try), and once the cause is gone the next try succeeds.
func TestRetryAfterFailure(t *testing.T) {
	h := newHost(t, "version = 3\n")
	confd := filepath.Dir(h.o.DropIn)
	write(t, confd, "not a directory\n", 0o644)
	var log bytes.Buffer
	f := &cmdFlags{o: h.o, noDoctor: true, retry: 10 * time.Millisecond}
	f.o.Log = &log
	code, msg := f.attempt(nil, "")
	if code != 1 || !strings.Contains(msg, "not a directory") || !strings.Contains(log.String(), "install failed: ") {
		t.Fatalf("first try: %d %q\n%s", code, msg, log.String())
	}
	select {
	case <-f.retryAfter(code):
	case <-time.After(5 * time.Second):
		t.Fatal("no retry after a failed install")
	}
	if again, msg2 := f.attempt(nil, msg); again != 1 || msg2 != msg || !strings.Contains(log.String(), "install failed again: ") {
		t.Fatalf("second try, same cause: %d %q\n%s", again, msg2, log.String())
	}
	if err := os.Remove(confd); err != nil {
		t.Fatal(err)
	}
	if code, msg := f.attempt(nil, msg); code != 0 || msg != "" {
		t.Fatalf("after the fix: %d %q\n%s", code, msg, log.String())
	}
	if f.retryAfter(0) != nil {
		t.Error("a retry after a successful install")
	}
	f.retry = 0
	if f.retryAfter(1) != nil {
		t.Error("a retry with --retry 0")
	}
}

// A release whose image ships CRIU, then one that ships none: the second
// install puts the node's own criu back (here the node had one of its
// own), and the record no longer names it; going back to the first
// installs it again, and uninstall leaves the node as it was.
func TestUpgradeDropsWhatTheReleaseNoLongerShips(t *testing.T) {
	h := newHost(t, configV3)
	nodeCRIU := filepath.Join(h.o.Prefix, "sbin", "criu")
	write(t, nodeCRIU, "the node's own criu", 0o755)
	before := h.tree()
	shipped := filepath.Join(h.o.Source, "sbin", "criu")
	write(t, shipped, "criu of release A", 0o755)
	if _, err := Install(context.Background(), h.o); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(nodeCRIU); string(got) != "criu of release A" {
		t.Fatalf("release A's criu not installed: %q", got)
	}
	if err := os.Remove(shipped); err != nil {
		t.Fatal(err)
	}
	res, err := Install(context.Background(), h.o)
	if err != nil {
		t.Fatalf("install of a release without CRIU: %v", err)
	}
	if got, _ := os.ReadFile(nodeCRIU); string(got) != "the node's own criu" || !strings.Contains(strings.Join(res.Files, " "), nodeCRIU) {
		t.Fatalf("after the release without CRIU: %s holds %q (files %q); want the node's own back", nodeCRIU, got, res.Files)
	}
	rec, err := loadRecord(h.o.Defaults())
	if err != nil || rec.has(filepath.Join(h.o.Prefix, "sbin", "criu")) {
		t.Fatalf("the record still names %s (%v)", nodeCRIU, err)
	}
	write(t, shipped, "criu of release A", 0o755)
	if _, err := Install(context.Background(), h.o); err != nil {
		t.Fatal(err)
	}
	if _, err := Uninstall(context.Background(), h.o); err != nil {
		t.Fatal(err)
	}
	same(t, before, h.tree())
}
