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

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/shim"
)

func TestRunnableImage(t *testing.T) {
	reg := startRegistry(t)
	ck := checkpointOnNode1(t, reg, reg.addr+"/cryo/app:v1")
	ref := reg.addr + "/ckpt/runnable:v1"
	builder := newNode(t, nil)
	out := builder.cryo(t, "image", "build", "--runnable", ck.archive, ref)
	wantIn(t, out, "built "+ref)
	digest := strings.TrimSpace(builder.cryo(t, "image", "push", ref))
	pinned := reg.addr + "/ckpt/runnable@" + lastLine(digest)

	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	n2 := startCRINodeAt(t, 1)
	t.Run("CRIRestores", func(t *testing.T) {
		n := n2.with(t)
		n.pullImage(pinned)
		p := n.newPod("runnable", criHandler, nil)
		if err := p.create(pinned); err != nil {
			t.Fatal(err)
		}
		if err := p.start(); err != nil {
			t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
		}
		n.assertContinues(p, ck)
		p.assertMarker()
		p.remove()
		assertNoWorkDirs(t, filepath.Join(dir, "restore"))
	})
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
	wantIn(t, a.cryo(t, "image", "build", "--runnable", "--containerd", ckpt, ref), "built "+ref)
	pinned := reg.addr + "/ckpt/runnable-" + v.dir + "@" + lastLine(a.imgNode.cryo(t, "image", "push", ref))

	b := startDaemon(t, v)
	b.ctr("images", "pull", "--plain-http", pinned)
	restored := uniqueID("restored")
	b.startApp(b.newContainerOf(pinned, restored, nil))
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

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
