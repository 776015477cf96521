package integration

// The hooks through cryo-runc (Podman's and CRI-O's route): named by the
// bundle's annotations, the pre-checkpoint hook before the suspend, the
// post-restore hook, an exec through runc's own exec, after the resume of
// a detached restore; the workload (hookScript) records both after a
// fresh tick of its CUDA app.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

func TestHooksCryoRunc(t *testing.T) {
	requireRoot(t)
	for _, kv := range fakeDriverEnv(t, "") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // cryo-runc finds the fake driver
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	newRootfs(t, bundle)
	port := testsupport.FreePort(t) // the host's network: the spec has no network namespace
	s := baseSpec("/bin/sh", "-c", hookScriptOn(port))
	giveStandIns(s, 0)
	s.Annotations = map[string]string{
		hook.AnnPreCheckpoint: fmt.Sprintf("http:POST /cgi-bin/ev?sleep port=%d", port),
		hook.AnnPostRestore:   "exec:/tmp/www/cgi-bin/ev wake",
	}
	writeSpec(t, bundle, s)
	c := &runcContainer{t: t, runc: cryoBin(t, "cryo-runc"), root: filepath.Join(dir, "runc-root"), bundle: bundle, id: "cryo-hooks-runc", log: &testsupport.Buffer{}}
	defer c.remove()
	c.start("run", "-d", "--bundle", bundle, c.id)
	waitFor(t, 20*time.Second, "the app and the CGI server", func() bool {
		_, err := runErr(5*time.Second, nil, "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', "+strconv.Itoa(port)+"), 1)")
		return err == nil && len(fakeTicks(t, "fakecuda-app", c.log.String())) >= 2
	})
	img := filepath.Join(dir, "img")
	c.checkpoint(img)
	events := func() []string {
		b, _ := os.ReadFile(filepath.Join(bundle, "rootfs/tmp/events"))
		return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "_"))
	}
	if ev := events(); len(ev) != 1 {
		t.Fatalf("events after the checkpoint %v, want one sleep\n%s", ev, c.log.String())
	}
	waitFor(t, 20*time.Second, "the container to stop", func() bool {
		out, _ := runErr(10*time.Second, nil, c.runc, "--root", c.root, "state", c.id)
		return !strings.Contains(out, `"running"`)
	})
	_, _ = runErr(30*time.Second, nil, c.runc, "--root", c.root, "delete", "--force", c.id)
	c.restore(img)
	ev := events()
	if len(ev) != 2 {
		t.Fatalf("events %v, want sleep then wake\n%s", ev, c.log.String())
	}
	if slept, woke := eventTick(t, ev[0], "sleep"), eventTick(t, ev[1], "wake"); woke <= slept {
		t.Fatalf("woke after tick %d, slept after %d", woke, slept)
	}
}
