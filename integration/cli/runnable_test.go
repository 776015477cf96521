package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/shim"
)

func TestRunnableImage(t *testing.T) {
	reg := harness.StartRegistry(t)
	ck := harness.CheckpointOnNode1(t, reg, reg.Addr+"/cryo/app:v1")
	ref := reg.Addr + "/ckpt/runnable:v1"
	builder := harness.NewNode(t, nil)
	out := builder.Cryo(t, "image", "build", "--runnable", "--split", pagesBlobSplit, ck.Archive, ref)
	harness.WantIn(t, out, "built "+ref)
	digest := strings.TrimSpace(builder.Cryo(t, "image", "push", ref))
	pinned := reg.Addr + "/ckpt/runnable@" + harness.LastLine(digest)
	refOld := reg.Addr + "/ckpt/runnable-compressed:v1"
	harness.WantIn(t, builder.Cryo(t, "image", "build", "--runnable", "--compress-pages", "--split", pagesBlobSplit, ck.Archive, refOld), "built "+refOld)
	pinnedOld := reg.Addr + "/ckpt/runnable-compressed@" + harness.LastLine(builder.Cryo(t, "image", "push", refOld))

	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	n2 := harness.StartCRINodeAt(t, 1)
	for _, c := range []struct {
		name, image string
		linked      bool
	}{{"CRIRestores", pinned, true}, {"CRIRestoresCompressedParts", pinnedOld, false}} {
		t.Run(c.name, func(t *testing.T) {
			n := n2.With(t)
			n.PullImage(c.image)
			mark := len(n.Log())
			p := n.NewPod("runnable", harness.CRIHandler, nil)
			if err := p.Create(c.image); err != nil {
				t.Fatal(err)
			}
			if err := p.Start(); err != nil {
				t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
			}
			n.AssertContinues(p, ck)
			p.AssertMarker()
			p.Remove()
			assertNoWorkDirs(t, filepath.Join(dir, "restore"))
			assertLinked(t, n.Log()[mark:], c.linked)
		})
	}
	t.Run("RuncPodRunsFresh", func(t *testing.T) {
		n := n2.With(t)
		p := n.NewPod("runnable-runc", harness.CRIRuncHandler, nil)
		assertFresh(n, p, pinned)
	})
	t.Run("DeclinedRunsFresh", func(t *testing.T) {
		n := n2.With(t)
		p := n.NewPod("runnable-declined", harness.CRIHandler, map[string]string{shim.AnnRestore: "false"})
		assertFresh(n, p, pinned)
	})
	for _, v := range harness.CtrdVersions {
		t.Run("Ctr/"+v.Name, func(t *testing.T) { testRunnableCtr(t, v, reg, ck.App) })
	}
}

// testRunnableCtr: a containerd checkpoint of the app (run from the
// registry's image) built as a runnable image restores with a plain run of
// that image on the cryo runtime, made as `ctr run` makes it and given the
// same GPU (newContainerOf): containerd pulls and unpacks it, and the shim
// restores from its content store.
func testRunnableCtr(t *testing.T, v harness.CtrdVersion, reg *harness.ImgRegistry, app string) {
	a := harness.NewCtrdNode(t, v)
	a.Ctr("images", "pull", "--plain-http", app)
	id := harness.UniqueID("runnable")
	a.StartApp(a.NewContainerOf(app, id, nil))
	a.Ctr("task", "exec", "--exec-id", "mark", id, "/bin/sh", "-c", "echo carried > /marker")
	ckpt, tick := a.TaskCheckpoint(id, "--exit")
	a.WaitStopped(id)
	ref := reg.Addr + "/ckpt/runnable-" + v.Dir + ":v1"
	harness.WantIn(t, a.Cryo(t, "image", "build", "--runnable", "--split", pagesBlobSplit, "--containerd", ckpt, ref), "built "+ref)
	pinned := reg.Addr + "/ckpt/runnable-" + v.Dir + "@" + harness.LastLine(a.ImgNode.Cryo(t, "image", "push", ref))

	b := harness.StartDaemon(t, v)
	b.Ctr("images", "pull", "--plain-http", pinned)
	restored := harness.UniqueID("restored")
	mark := len(b.Log())
	b.StartApp(b.NewContainerOf(pinned, restored, nil))
	assertLinked(t, b.Log()[mark:], true)
	if first := harness.CtrdTicks(t, b.LogPath(restored))[0]; first <= tick {
		t.Fatalf("ctr run of the runnable image began at tick %d; the checkpoint was after tick %d", first, tick)
	}
	if got := b.Ctr("task", "exec", "--exec-id", "cat", restored, "/bin/cat", "/marker"); got != "carried\n" {
		t.Errorf("/marker in the restored container: %q", got)
	}
	b.Ctr("task", "kill", "-s", "SIGKILL", restored)
	b.WaitStopped(restored) // and deletes the task
	b.Ctr("containers", "rm", restored)
}

// assertFresh: a pod from the runnable image starts the application from
// its beginning, with the container's changes in its root file system.
func assertFresh(n *harness.CRINode, p *harness.CRIPod, image string) {
	n.T.Helper()
	cfg := p.AppConfig(image)
	if err := p.CreateWith(cfg); err != nil {
		n.T.Fatal(err)
	}
	if err := p.Start(); err != nil {
		n.T.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
	}
	n.WaitTicksIn(p.LogPath(), 3)
	if first := harness.CtrdTicks(n.T, p.LogPath())[0]; first != 1 {
		n.T.Fatalf("a fresh start from the runnable image began at tick %d, want 1", first)
	}
	p.AssertMarker()
	p.Remove()
}

// assertNoWorkDirs: a restore leaves no copy of the checkpoint's memory.
func assertNoWorkDirs(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	if len(entries) > 0 {
		t.Errorf("restore work directories left in %s: %v", dir, entries)
	}
}

// pagesBlobSplit makes every pages file of the test app a blob of its own.
const pagesBlobSplit = "4096"

// assertLinked: the shim's log in containerd's log says the restore
// hard-linked pages from the content store (linked), or linked none and
// copied none (an image of compressed parts only).
func assertLinked(t *testing.T, log string, linked bool) {
	t.Helper()
	m := regexp.MustCompile(`linked_bytes=(\d+) `).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no linked_bytes in the shim's log of the restore:\n%s", harness.LastLines(log, 20))
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); (n > 0) != linked {
		t.Errorf("the restore linked %d bytes of pages from containerd's content store, want linked %v", n, linked)
	}
	if strings.Contains(log, "copied_bytes=") && !regexp.MustCompile(`copied_bytes=0\b`).MatchString(log) {
		t.Errorf("the restore copied pages blobs instead of linking them:\n%s", harness.LastLines(log, 20))
	}
}
