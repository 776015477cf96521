package integration

// containerd checkpoints through a real registry: two "nodes", each a
// private containerd daemon with its own root and socket and its own cryo
// image store. Node A runs fakecuda-app on the cryo runtime, checkpoints it
// with ctr, builds the checkpoint into an OCI image and pushes it; node B
// pulls it and restores it into its containerd as a new container, whose
// tick counter and device memory carry on.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestImageContainerd(t *testing.T) {
	for _, v := range ctrdVersions {
		t.Run(v.name, func(t *testing.T) { testImageContainerd(t, v) })
	}
}

// ctrdNode is a containerd daemon with its own cryo image store.
type ctrdNode struct {
	*daemon
	*imgNode
}

func newCtrdNode(t *testing.T, v ctrdVersion) *ctrdNode {
	d := startDaemon(t, v)
	return &ctrdNode{daemon: d, imgNode: newNode(t, nil)}
}

func (n *ctrdNode) at() []string {
	return []string{"--address", n.socket, "--namespace", testNamespace}
}

func (n *ctrdNode) cryo(t *testing.T, args ...string) string {
	t.Helper()
	return n.imgNode.cryo(t, n.withAt(args)...)
}

func (n *ctrdNode) cryoFails(t *testing.T, args ...string) string {
	t.Helper()
	return n.imgNode.cryoFails(t, n.withAt(args)...)
}

// withAt puts --address and --namespace after the subcommand words of
// "image build", "image restore" and "restore".
func (n *ctrdNode) withAt(args []string) []string {
	i := 1
	if args[0] == "image" {
		i = 2
	}
	out := append(append([]string{}, args[:i]...), n.at()...)
	return append(out, args[i:]...)
}

func testImageContainerd(t *testing.T, v ctrdVersion) {
	reg := startRegistry(t)
	a, b := newCtrdNode(t, v), newCtrdNode(t, v)
	a.importTestImage()

	// runc's state directory is shared by all daemons of the host: ids
	// unique to this run keep parallel runs apart.
	app, clone := uniqueID("app"), uniqueID("clone")

	// Node A: run, write into the rootfs, checkpoint (the task exits).
	a.runApp(app)
	a.ctr("task", "exec", "--exec-id", "mark", app, "/bin/sh", "-c", "echo carried > /marker")
	ckpt, tick := a.taskCheckpoint(app, "--exit")
	a.waitStopped(app)
	ref := reg.addr + "/ckpt/ctrd-" + v.dir + ":v1"
	out := a.cryo(t, "image", "build", "--containerd", ckpt, ref)
	wantIn(t, out, "layer base", "layer rootfs", "built "+ref)
	a.imgNode.cryo(t, "image", "push", ref)
	wantIn(t, a.imgNode.cryo(t, "inspect", ref), "Kind:         containerd", "Base image:   "+testImage)

	// Node B without the base image: a clear refusal, nothing created. The
	// app ran with GPU 0's stand-in node, which node B has only as a path
	// of the test's: --gpus hands it over as a device plugin would.
	gpu0 := standInNode(t, 0)
	out = b.cryoFails(t, "image", "restore", "--pull", "--name", clone, "--gpus", gpu0, ref)
	wantIn(t, out, "base image "+testImage+" is not in containerd namespace", "image pull")

	// Node B with it (the same image as A's): restore; the counter goes on
	// from where A stopped.
	b.ctr("images", "import", "--all-platforms", filepath.Join(a.dir, "image", "image.tar"))
	log := b.logPath(clone)
	// The refusal above came before the pull: nothing came down yet.
	out = b.cryo(t, "image", "restore", "--pull", "--containerd", "--name", clone, "--log", log, "--gpus", gpu0, ref)
	wantIn(t, out, "restored container "+clone, "in place (no copy into containerd's content store)")
	if strings.Contains(out, "warning") {
		t.Errorf("restore warned:\n%s", out)
	}
	b.waitTicksIn(log, 5)
	if first := ctrdTicks(t, log)[0]; first <= tick {
		t.Fatalf("restored app printed tick %d first, want just after %d (a continuation, not a restart)", first, tick)
	}
	if got := strings.TrimSpace(b.ctr("task", "exec", "--exec-id", "cat", clone, "/bin/cat", "/marker")); got != "carried" {
		t.Errorf("rootfs change lost: /marker = %q", got)
	}
	if st := b.taskStatus(clone); st != "running" {
		t.Errorf("restored task is %s", st)
	}

	// A plain image is refused before anything reaches containerd.
	plain := reg.addr + "/plain/busybox:v1"
	pushPlainImage(t, plain)
	out = b.cryoFails(t, "restore", "--image", plain, "--pull", "--name", "plain")
	wantIn(t, out, "is not a checkpoint image")
	containerCheckpointFlow(t, a, b, reg)
}

// containerCheckpointFlow: `ctr container checkpoint --task --rw`, exported
// with `ctr image export`, built from the tar, restored with `cryo restore
// --image` as a second container.
func containerCheckpointFlow(t *testing.T, a, b *ctrdNode, reg *imgRegistry) {
	app, clone := uniqueID("app"), uniqueID("clone")
	a.runApp(app)
	ck := "localhost/ckpt/" + app + ":1"
	tick := a.containerCheckpoint(app, ck)
	a.remove(app)
	tar := filepath.Join(t.TempDir(), "ckpt.tar")
	// ctr 2.x (it also serves a 1.7 daemon); --local: the export through
	// the transfer service has been seen to end before the tar was complete.
	if out, err := a.ctrBinErr(a.ctrWithOptions(), "image", "export", "--local", "--skip-manifest-json", tar, ck); err != nil {
		t.Fatalf("ctr image export: %v\n%s", err, out)
	}
	ref := reg.addr + "/ckpt/ctrd-container:v1"
	wantIn(t, a.imgNode.cryo(t, "image", "build", tar, ref), "built "+ref)
	a.imgNode.cryo(t, "image", "push", ref)
	log := b.logPath(clone)
	out := b.cryo(t, "restore", "--image", ref, "--pull", "--name", clone, "--log", log, "--gpus", standInNode(t, 0))
	pid, _ := strconv.Atoi(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
	if pid <= 0 {
		t.Errorf("cryo restore --image printed no pid:\n%s", out)
	}
	b.waitTicksIn(log, 5)
	if first := ctrdTicks(t, log)[0]; first < tick {
		t.Fatalf("restored app printed tick %d first, want ≥ %d", first, tick)
	}
}

func uniqueID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9)
}
