package k8s

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/installer"
)

func TestInstallerContainerdConfig(t *testing.T) {
	harness.RequireRoot(t)
	for _, v := range harness.CtrdVersions {
		t.Run(v.Name, func(t *testing.T) {
			bin := filepath.Join(harness.DepsDir(), v.Dir, "usr/bin/containerd")
			if _, err := os.Stat(bin); err != nil {
				t.Fatalf("%s missing (%v): run `make deps`", bin, err)
			}
			cri := `"io.containerd.grpc.v1.cri"`
			if v.ConfigVersion == 3 {
				cri = `'io.containerd.cri.v1.runtime'`
			}
			own := "version = " + string(rune('0'+v.ConfigVersion)) + "\n[plugins." + cri + ".cni]\n  conf_dir = \"/etc/cni/node-own\"\n"
			for _, main := range []string{"", own} {
				name := "existing config"
				if main == "" {
					name = "no config file"
				}
				t.Run(name, func(t *testing.T) { testInstallerDump(t, bin, main, cri) })
			}
		})
	}
}

func testInstallerDump(t *testing.T, bin, main, cri string) {
	dir := t.TempDir()
	o := installer.Options{HostRoot: "/", Source: filepath.Dir(harness.BinDir()), Prefix: filepath.Join(dir, "usr/local"),
		ContainerdConfig: filepath.Join(dir, "etc/containerd/config.toml"), DropIn: filepath.Join(dir, "etc/containerd/conf.d/cryo.toml"),
		StateDir: filepath.Join(dir, "state"), Containerd: bin, Socket: filepath.Join(dir, "c.sock")}
	mkdirAll(t, filepath.Dir(o.ContainerdConfig))
	if main != "" {
		harness.WriteFile(t, o.ContainerdConfig, main)
	}
	o.Restart = fakeRestart(t, o.Socket)
	var before string
	if main != "" { // containerd 1.7 refuses a --config that does not exist
		before = dumpConfig(t, bin, o.ContainerdConfig)
	}
	if _, err := installer.Install(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	after := dumpConfig(t, bin, o.ContainerdConfig)
	harness.WantIn(t, after, "[plugins."+cri+".containerd.runtimes.cryo]", "io.containerd.cryo.v2", "cryo.io/*",
		"enable_cdi = true", filepath.Join(o.Prefix, "bin/containerd-shim-cryo-v2"))
	if main != "" {
		harness.WantIn(t, after, "/etc/cni/node-own")
	}
	if _, err := installer.Uninstall(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if main != "" {
		if got := dumpConfig(t, bin, o.ContainerdConfig); got != before {
			t.Errorf("config dump after uninstall differs from before install:\n%s\nwant:\n%s", got, before)
		}
	}
	if main == "" {
		if _, err := os.Stat(o.ContainerdConfig); err == nil {
			t.Errorf("uninstall left %s, which install created", o.ContainerdConfig)
		}
	} else if got, _ := os.ReadFile(o.ContainerdConfig); string(got) != main {
		t.Errorf("config.toml after uninstall:\n%s\nwant:\n%s", got, main)
	}
}

// dumpConfig is `containerd config dump` of the file (containerd's
// defaults where it is missing).
func dumpConfig(t *testing.T, bin, cfg string) string {
	t.Helper()
	out, err := harness.RunErr(time.Minute, nil, bin, "--config", cfg, "config", "dump")
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, out)
	}
	return out
}

// fakeRestart is a restart command for a test without a daemon: a socket
// that a goroutine makes anew at each request, as a restarted containerd
// does.
func fakeRestart(t *testing.T, sock string) []string {
	t.Helper()
	marker := sock + ".restart"
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		defer func() { l.Close() }()
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := os.Stat(marker); err != nil {
				continue
			}
			l.Close()
			_ = os.Remove(sock)
			if l, err = net.Listen("unix", sock); err != nil {
				return
			}
			_ = os.Remove(marker)
		}
	}()
	return []string{"/bin/sh", "-c", "touch " + strings.ReplaceAll(marker, " ", `\ `)}
}
