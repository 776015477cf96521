package podman

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

func TestHooksCryoRunc(t *testing.T) {
	harness.RequireRoot(t)
	for _, kv := range harness.FakeDriverEnv(t, "") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // cryo-runc finds the fake driver
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	harness.NewRootfs(t, bundle)
	port := testsupport.FreePort(t) // the host's network: the spec has no network namespace
	s := harness.BaseSpec("/bin/sh", "-c", harness.HookScriptOn(port))
	harness.GiveStandIns(s, 0)
	s.Annotations = map[string]string{
		hook.AnnPreCheckpoint: fmt.Sprintf("http:POST /cgi-bin/ev?sleep port=%d", port),
		hook.AnnPostRestore:   "exec:/tmp/www/cgi-bin/ev wake",
	}
	harness.WriteSpec(t, bundle, s)
	c := &harness.RuncContainer{T: t, Runc: harness.CryoBin(t, "cryo-runc"), Root: filepath.Join(dir, "runc-root"), Bundle: bundle, ID: "cryo-hooks-runc", Log: &testsupport.Buffer{}}
	defer c.Remove()
	c.Start("run", "-d", "--bundle", bundle, c.ID)
	harness.WaitFor(t, 20*time.Second, "the app and the CGI server", func() bool {
		_, err := harness.RunErr(5*time.Second, nil, "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', "+strconv.Itoa(port)+"), 1)")
		return err == nil && len(harness.FakeTicks(t, "fakecuda-app", c.Log.String())) >= 2
	})
	img := filepath.Join(dir, "img")
	c.Checkpoint(img)
	events := func() []string {
		b, _ := os.ReadFile(filepath.Join(bundle, "rootfs/tmp/events"))
		return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "_"))
	}
	if ev := events(); len(ev) != 1 {
		t.Fatalf("events after the checkpoint %v, want one sleep\n%s", ev, c.Log.String())
	}
	harness.WaitFor(t, 20*time.Second, "the container to stop", func() bool {
		out, _ := harness.RunErr(10*time.Second, nil, c.Runc, "--root", c.Root, "state", c.ID)
		return !strings.Contains(out, `"running"`)
	})
	_, _ = harness.RunErr(30*time.Second, nil, c.Runc, "--root", c.Root, "delete", "--force", c.ID)
	c.Restore(img)
	ev := events()
	if len(ev) != 2 {
		t.Fatalf("events %v, want sleep then wake\n%s", ev, c.Log.String())
	}
	if slept, woke := harness.EventTick(t, ev[0], "sleep"), harness.EventTick(t, ev[1], "wake"); woke <= slept {
		t.Fatalf("woke after tick %d, slept after %d", woke, slept)
	}
}
