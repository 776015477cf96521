package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// editManifest rewrites the manifest of img as raw JSON, as an attacker
// who can write the image directory would.
func editManifest(t *testing.T, img string, edit func(map[string]any)) {
	t.Helper()
	path := filepath.Join(img, manifest.ManifestName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTrustManifestNeedsEmptied: the manifest of a fakecuda-app checkpoint
// is edited to need no GPU, and the restoring host has another GPU model.
// The manifest is not among its own digests, so the edit passes them;
// before, no host check ran, CRIU restored the app, its CUDA resume failed
// and it was left suspended. The restore must refuse the manifest before
// CRIU runs, and leave nothing behind.
func TestTrustManifestNeedsEmptied(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	killDumped(t, p)
	m, err := manifest.Read(img)
	if err != nil || !m.HasCUDA() || len(m.Needs) == 0 {
		t.Fatalf("manifest of the checkpoint: %+v, %v", m, err)
	}
	if _, ok := m.Digests[manifest.ManifestName]; ok {
		t.Fatal("the manifest is among its own digests: this attack would not get past them")
	}
	editManifest(t, img, func(m map[string]any) { m["needs"] = []any{} })

	out := harness.BareCryoFails(t, append(env, "CRYO_FAKE_GPUS="+harness.A100), "restore", "--dir", img)
	harness.WantIn(t, out, "failed at step verify", "no GPU needs", "manifest inconsistent with itself", "nothing was restored", "remedy: re-take the checkpoint")
	bareNotRestored(t, p, img)
	if strings.Contains(out, "restoring with CRIU") {
		t.Fatalf("CRIU ran:\n%s", out)
	}
}

// plainCRIUDump dumps a counter process with criu itself, as a user of
// plain CRIU would: a CRIU directory with no cryo manifest.
func plainCRIUDump(t *testing.T) (*harness.BareProc, string) {
	t.Helper()
	p := bareStartCounter(t)
	img := filepath.Join(t.TempDir(), "plain")
	if err := os.Mkdir(img, 0o700); err != nil {
		t.Fatal(err)
	}
	harness.Run(t, time.Minute, nil, "/usr/local/sbin/criu", "dump", "-t", strconv.Itoa(p.PID), "-D", img, "-o", "dump.log")
	killDumped(t, p)
	return p, img
}

// TestTrustManifestBareCRIUDump: a plain `criu dump` directory keeps
// today's contract for a bare tree (`cryo restore --dir` restores it as a
// CPU checkpoint, with a warning), but `cryo image build` refuses it: an
// image is restored elsewhere, into containers, where only a checkpoint
// with cryo's manifest may go.
func TestTrustManifestBareCRIUDump(t *testing.T) {
	harness.RequireRoot(t)
	p, img := plainCRIUDump(t)
	n := harness.NewNode(t, nil)
	out := n.CryoFails(t, "image", "build", img, "localhost/cryo/plain:1")
	harness.WantIn(t, out, "build of localhost/cryo/plain:1 failed", "no cryo manifest", "remedy: checkpoint through cryo")
	if ls := n.Cryo(t, "image", "ls"); strings.Contains(ls, "plain") {
		t.Fatalf("an image was stored after the refusal:\n%s", ls)
	}

	out = harness.Run(t, harness.BareTimeout, nil, harness.CryoBin(t, "cryo"), "restore", "--dir", img)
	harness.WantIn(t, out, "no cryo manifest", strconv.Itoa(p.PID))
	before := bareCounter(p)
	harness.WaitFor(t, 10*time.Second, "the restored counter to count", func() bool { return bareCounter(p) > before+3 })
}

// TestTrustManifestCryoRunc: a container's checkpoint whose manifest was
// removed, so that its digests are not checked, is refused by cryo-runc,
// as Podman runs it, before runc restore is called. Its images name no
// CUDA library (before, only those were refused): a CPU container's.
func TestTrustManifestCryoRunc(t *testing.T) {
	harness.RequireRoot(t)
	dir := harness.RwCraftCheckpoint(t)
	for _, name := range []string{manifest.ManifestName, "files.img"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	bundle := harness.RwBundle(t, t.TempDir())
	env, calls := harness.RwFakeRunc(t, 0)
	env = append(env, harness.FakeDriverEnv(t, "")...)
	out, err := harness.RunErr(30*time.Second, env, harness.CryoBin(t, "cryo-runc"),
		"restore", "--detach", "--image-path", dir, "--work-path", filepath.Dir(dir), "--bundle", bundle, "ctr")
	if err == nil {
		t.Fatalf("cryo-runc restored a checkpoint without a manifest:\n%s", out)
	}
	harness.WantIn(t, out, "restore of ctr failed at step verify", "cryo did not take", "no cryo manifest", "nothing was restored", "remedy: re-take the checkpoint through cryo")
	for _, c := range calls() {
		for _, a := range c {
			if a == "restore" {
				t.Fatalf("runc restore was called: %q", c)
			}
		}
	}
}

// TestTrustManifestShim: the same through containerd and the cryo shim: a
// CPU container's checkpoint taken with `ctr task checkpoint --image-path`,
// its manifest removed, is refused at the task's Create, and no task is
// left.
func TestTrustManifestShim(t *testing.T) {
	harness.RequireRoot(t)
	d := harness.StartDaemon(t, harness.CtrdVersions[1])
	d.ImportTestImage()
	os.MkdirAll(filepath.Join(d.Dir, "logs"), 0o755)
	d.Ctr("run", "-d", "--runtime", harness.CryoRuntime, "--log-uri", "file://"+d.LogPath("nm"), harness.TestImage, "nm",
		"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i; sleep 0.1; done")
	harness.WaitFor(t, 10*time.Second, "the counter", func() bool { b, _ := os.ReadFile(d.LogPath("nm")); return len(b) > 4 })
	dir := filepath.Join(d.Dir, "images")
	if out, err := d.CtrBinErr(d.CtrWithOptions(), "task", "checkpoint", "--exit", "--image-path", dir, "nm"); err != nil {
		t.Fatalf("ctr task checkpoint: %v\n%s", err, out)
	}
	d.WaitStopped("nm")
	if err := os.Remove(filepath.Join(dir, manifest.ManifestName)); err != nil {
		t.Fatal(err)
	}
	_, err := d.NewContainer("nm-restored").NewTask(harness.NamespacedCtx(), cio.LogFile(d.LogPath("nm-restored")), client.WithRestoreImagePath(dir))
	if err == nil {
		t.Fatalf("the shim restored a checkpoint without a manifest\n%s", harness.LastLines(d.Log(), 30))
	}
	harness.WantIn(t, err.Error(), "cryo did not take", "no cryo manifest", "nothing was restored")
	d.AssertNoTask("nm-restored")
	d.AssertNoRestore("nm-restored")
}
