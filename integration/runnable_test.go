package integration

// In Kubernetes, a checkpoint is a container image: `cryo image build
// --runnable` stacks the container's changes on the application's image
// and carries the checkpoint in blobs runtimes do not unpack. The kubelet
// (here, CRI's PullImage, as the kubelet calls it) pulls it like any image;
// a cryo pod whose container image is the checkpoint restores from
// containerd's content store; any other runtime, or a pod that declines
// the restore, starts the application fresh from the same image. On
// containerd 1.7 and 2.x, ctr pulls it and a container of it made as `ctr
// run` makes one restores the same way.
//
// The pages files travel as blobs of their own (--split makes every pages
// file of the small test app one), which the shim hard-links from
// containerd's content store instead of copying; an image with every
// part compressed, as cryo built them before (--compress-pages), restores
// too.

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/shim"
)

func TestRunnableImage(t *testing.T) {
	reg := startRegistry(t)
	ck := checkpointOnNode1(t, reg, reg.addr+"/cryo/app:v1")
	ref := reg.addr + "/ckpt/runnable:v1"
	builder := newNode(t, nil)
	out := builder.cryo(t, "image", "build", "--runnable", "--split", pagesBlobSplit, ck.archive, ref)
	wantIn(t, out, "built "+ref)
	digest := strings.TrimSpace(builder.cryo(t, "image", "push", ref))
	pinned := reg.addr + "/ckpt/runnable@" + lastLine(digest)
	refOld := reg.addr + "/ckpt/runnable-compressed:v1"
	wantIn(t, builder.cryo(t, "image", "build", "--runnable", "--compress-pages", "--split", pagesBlobSplit, ck.archive, refOld), "built "+refOld)
	pinnedOld := reg.addr + "/ckpt/runnable-compressed@" + lastLine(builder.cryo(t, "image", "push", refOld))

	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	n2 := startCRINodeAt(t, 1)
	for _, c := range []struct {
		name, image string
		linked      bool
	}{{"CRIRestores", pinned, true}, {"CRIRestoresCompressedParts", pinnedOld, false}} {
		t.Run(c.name, func(t *testing.T) {
			n := n2.with(t)
			n.pullImage(c.image)
			mark := len(n.log())
			p := n.newPod("runnable", criHandler, nil)
			if err := p.create(c.image); err != nil {
				t.Fatal(err)
			}
			if err := p.start(); err != nil {
				t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
			}
			n.assertContinues(p, ck)
			p.assertMarker()
			p.remove()
			assertNoWorkDirs(t, filepath.Join(dir, "restore"))
			assertLinked(t, n.log()[mark:], c.linked)
		})
	}
	t.Run("RuncPodRunsFresh", func(t *testing.T) {
		n := n2.with(t)
		p := n.newPod("runnable-runc", criRuncHandler, nil)
		assertFresh(n, p, pinned)
	})
	t.Run("DeclinedRunsFresh", func(t *testing.T) {
		n := n2.with(t)
		p := n.newPod("runnable-declined", criHandler, map[string]string{shim.AnnRestore: "false"})
		assertFresh(n, p, pinned)
	})
	for _, v := range ctrdVersions {
		t.Run("Ctr/"+v.name, func(t *testing.T) { testRunnableCtr(t, v, reg, ck.app) })
	}
}

// testRunnableCtr: a containerd checkpoint of the app (run from the
// registry's image) built as a runnable image restores with a plain run of
// that image on the cryo runtime, made as `ctr run` makes it and given the
// same GPU (newContainerOf): containerd pulls and unpacks it, and the shim
// restores from its content store.
func testRunnableCtr(t *testing.T, v ctrdVersion, reg *imgRegistry, app string) {
	a := newCtrdNode(t, v)
	a.ctr("images", "pull", "--plain-http", app)
	id := uniqueID("runnable")
	a.startApp(a.newContainerOf(app, id, nil))
	a.ctr("task", "exec", "--exec-id", "mark", id, "/bin/sh", "-c", "echo carried > /marker")
	ckpt, tick := a.taskCheckpoint(id, "--exit")
	a.waitStopped(id)
	ref := reg.addr + "/ckpt/runnable-" + v.dir + ":v1"
	wantIn(t, a.cryo(t, "image", "build", "--runnable", "--split", pagesBlobSplit, "--containerd", ckpt, ref), "built "+ref)
	pinned := reg.addr + "/ckpt/runnable-" + v.dir + "@" + lastLine(a.imgNode.cryo(t, "image", "push", ref))

	b := startDaemon(t, v)
	b.ctr("images", "pull", "--plain-http", pinned)
	restored := uniqueID("restored")
	mark := len(b.log())
	b.startApp(b.newContainerOf(pinned, restored, nil))
	assertLinked(t, b.log()[mark:], true)
	if first := ctrdTicks(t, b.logPath(restored))[0]; first <= tick {
		t.Fatalf("ctr run of the runnable image began at tick %d; the checkpoint was after tick %d", first, tick)
	}
	if got := b.ctr("task", "exec", "--exec-id", "cat", restored, "/bin/cat", "/marker"); got != "carried\n" {
		t.Errorf("/marker in the restored container: %q", got)
	}
	b.ctr("task", "kill", "-s", "SIGKILL", restored)
	b.waitStopped(restored) // and deletes the task
	b.ctr("containers", "rm", restored)
}

// assertFresh: a pod from the runnable image starts the application from
// its beginning, with the container's changes in its root file system.
func assertFresh(n *criNode, p *criPod, image string) {
	n.t.Helper()
	cfg := p.appConfig(image)
	if err := p.createWith(cfg); err != nil {
		n.t.Fatal(err)
	}
	if err := p.start(); err != nil {
		n.t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
	}
	n.waitTicksIn(p.logPath(), 3)
	if first := ctrdTicks(n.t, p.logPath())[0]; first != 1 {
		n.t.Fatalf("a fresh start from the runnable image began at tick %d, want 1", first)
	}
	p.assertMarker()
	p.remove()
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
		t.Fatalf("no linked_bytes in the shim's log of the restore:\n%s", lastLines(log, 20))
	}
	if n, _ := strconv.ParseInt(m[1], 10, 64); (n > 0) != linked {
		t.Errorf("the restore linked %d bytes of pages from containerd's content store, want linked %v", n, linked)
	}
	if strings.Contains(log, "copied_bytes=") && !regexp.MustCompile(`copied_bytes=0\b`).MatchString(log) {
		t.Errorf("the restore copied pages blobs instead of linking them:\n%s", lastLines(log, 20))
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
