package integration

// The Kubernetes flow end to end through CRI, with real parts: node 1
// (containerd 2.x with CRI and a CNI bridge) checkpoints a CUDA container
// of a cryo pod with CheckpointContainer, as the kubelet's checkpoint API
// does; `cryo image build` makes a checkpoint image of the archive and
// `cryo image push` sends it to a registry on loopback; node 2 (a second
// containerd with its own root, state, CRI socket, CNI network and cryo
// image store) starts new pods from it.

import (
	"path/filepath"
	"testing"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

// criCheckpoint is what node 1 hands to node 2.
type criCheckpoint struct {
	archive string // the archive of CheckpointContainer
	tag     string // its checkpoint image, in the registry
	ref     string // the same, pinned by digest, as a pod names it
	app     string // the app's image, in the registry
	before  int    // the last tick the app printed before the checkpoint
	after   int    // the last tick it printed on node 1 after it
	node1   *criNode
}

func TestCRIRestore(t *testing.T) {
	start := time.Now()
	reg := startRegistry(t)
	ck := checkpointOnNode1(t, reg, reg.addr+"/cryo/app:v1")
	t.Logf("node 1: checkpoint, build and push in %s", time.Since(start).Round(time.Millisecond))

	// Node 2's shims inherit containerd's environment: their own image
	// store and restore work directory, as on another machine, and the
	// node's opt-in to restores from annotations: the pods' namespace may
	// restore from the registry's ckpt/ repositories (plain HTTP).
	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	usePolicy(t, allowOnly("default", []string{reg.addr + "/ckpt/"}, reg.addr))
	n2 := startCRINodeAt(t, 1)
	for _, c := range []struct {
		name string
		run  func(*criNode, criCheckpoint)
	}{
		{"Annotation", testCRIRestoreAnnotation},
		{"TwiceAtOnceWithHook", testCRIRestoreTwice},
		{"PreCheckpointHook", testCRIPreCheckpointHook},
		{"WrongGPU", testCRIRestoreWrongGPU},
		{"ContainerdRestore", testCRIContainerdRestore},
		{"RuncPod", testCRIRuncPod},
		{"CryoRuncBinary", testCRICryoRuncBinary},
	} {
		t.Run(c.name, func(t *testing.T) {
			began := time.Now()
			c.run(n2.with(t), ck)
			t.Logf("%s took %s", c.name, time.Since(began).Round(time.Millisecond))
		})
	}
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

// checkpointOnNode1 runs the app (image app, pulled through CRI from a
// registry) in a cryo pod on node 1, checkpoints it
// through CRI, removes the pod, and builds and pushes the checkpoint image.
// Node 1 stays up until the test ends: its archive is node 2's input for
// containerd's own CRI restore.
func checkpointOnNode1(t *testing.T, reg *imgRegistry, app string) criCheckpoint {
	n1 := startCRINodeAt(t, 0)
	n1.publishApp(app)
	p := n1.runPodOf("source", criHandler, app)
	p.exec("/bin/sh", "-c", "echo carried > /marker") // a rootfs change
	ck := criCheckpoint{archive: filepath.Join(n1.dir, "checkpoint-source.tar"), tag: reg.addr + "/ckpt/cri-source:v1", app: app, node1: n1}
	ck.before = ctrdLastTick(t, p.logPath())
	took := p.checkpoint(ck.archive)
	n1.waitTicksIn(p.logPath(), 2)
	ck.after = ctrdLastTick(t, p.logPath())
	p.remove()
	t.Logf("CheckpointContainer took %s; ticks %d before, %d after", took.Round(time.Millisecond), ck.before, ck.after)

	builder := newNode(t, nil)
	wantIn(t, builder.cryo(t, "image", "build", ck.archive, ck.tag), "built "+ck.tag)
	ck.ref = pinnedRef(ck.tag, builder.cryo(t, "image", "push", ck.tag))
	return ck
}

// testCRIRestoreAnnotation: a new cryo pod on node 2 whose annotation names
// the checkpoint image by digest, with a container of the app's ordinary image,
// continues from the checkpointed tick (not from the start, and with its
// CUDA state resumed: fakeTicks checks every tick), with the file it wrote
// before the checkpoint (the kubelet archive's rootfs diff).
func testCRIRestoreAnnotation(n *criNode, ck criCheckpoint) {
	p := n.newPod("restored", criHandler, map[string]string{imagerestore.AnnImage: ck.ref})
	if err := p.create(testImage); err != nil {
		n.t.Fatal(err)
	}
	if err := p.start(); err != nil {
		n.t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
	}
	n.assertContinues(p, ck)
	p.assertMarker()
	wantDigestLogged(n.t, n.log(), ck.ref)
	p.remove()
}

// assertContinues waits for the restored app's ticks and checks that the
// first one follows the checkpoint: after the last tick printed before it,
// and no later than one past the last tick node 1 printed after it.
func (n *criNode) assertContinues(p *criPod, ck criCheckpoint) {
	n.t.Helper()
	n.waitTicksIn(p.logPath(), 3)
	ticks := ctrdTicks(n.t, p.logPath())
	if first := ticks[0]; first <= ck.before || first > ck.after+1 {
		n.t.Fatalf("restored app's first tick %d; want one after %d (the checkpoint), at most %d", first, ck.before, ck.after+1)
	}
	if st := p.status(); st.State != criapi.ContainerState_CONTAINER_RUNNING {
		n.t.Fatalf("restored container: %s (%s), want running", st.State, st.Message)
	}
	n.t.Logf("restored: ticks %d…%d (checkpoint after tick %d)", ticks[0], lastOf(ticks), ck.before)
}

// assertMarker checks that the file the app's container wrote on node 1
// before the checkpoint is in the restored container.
func (p *criPod) assertMarker() {
	p.n.t.Helper()
	if got := p.exec("/bin/cat", "/marker"); got != "carried\n" {
		p.n.t.Errorf("/marker in the restored container: %q, want the checkpoint's rootfs change", got)
	}
}
