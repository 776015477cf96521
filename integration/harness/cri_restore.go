package harness

import (
	"path/filepath"
	"testing"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRICheckpoint is what node 1 hands to node 2.
type CRICheckpoint struct {
	Archive string // the archive of CheckpointContainer
	Tag     string // its checkpoint image, in the registry
	Ref     string // the same, pinned by digest, as a pod names it
	App     string // the app's image, in the registry
	Before  int    // the last tick the app printed before the checkpoint
	After   int    // the last tick it printed on node 1 after it
	Node1   *CRINode
}

// CheckpointOnNode1 runs the app (image app, pulled through CRI from a
// registry) in a cryo pod on node 1, checkpoints it
// through CRI, removes the pod, and builds and pushes the checkpoint image.
// Node 1 stays up until the test ends: its archive is node 2's input for
// containerd's own CRI restore.
func CheckpointOnNode1(t *testing.T, reg *ImgRegistry, app string) CRICheckpoint {
	n1 := StartCRINodeAt(t, 0)
	n1.PublishApp(app)
	p := n1.RunPodOf("source", CRIHandler, app)
	p.Exec("/bin/sh", "-c", "echo carried > /marker") // a rootfs change
	ck := CRICheckpoint{Archive: filepath.Join(n1.Dir, "checkpoint-source.tar"), Tag: reg.Addr + "/ckpt/cri-source:v1", App: app, Node1: n1}
	ck.Before = CtrdLastTick(t, p.LogPath())
	took := p.Checkpoint(ck.Archive)
	n1.WaitTicksIn(p.LogPath(), 2)
	ck.After = CtrdLastTick(t, p.LogPath())
	p.Remove()
	t.Logf("CheckpointContainer took %s; ticks %d before, %d after", took.Round(time.Millisecond), ck.Before, ck.After)

	builder := NewNode(t, nil)
	WantIn(t, builder.Cryo(t, "image", "build", ck.Archive, ck.Tag), "built "+ck.Tag)
	ck.Ref = PinnedRef(ck.Tag, builder.Cryo(t, "image", "push", ck.Tag))
	return ck
}

// AssertContinues waits for the restored app's ticks and checks that the
// first one follows the checkpoint: after the last tick printed before it,
// and no later than one past the last tick node 1 printed after it.
func (n *CRINode) AssertContinues(p *CRIPod, ck CRICheckpoint) {
	n.T.Helper()
	n.WaitTicksIn(p.LogPath(), 3)
	ticks := CtrdTicks(n.T, p.LogPath())
	if first := ticks[0]; first <= ck.Before || first > ck.After+1 {
		n.T.Fatalf("restored app's first tick %d; want one after %d (the checkpoint), at most %d", first, ck.Before, ck.After+1)
	}
	if st := p.Status(); st.State != criapi.ContainerState_CONTAINER_RUNNING {
		n.T.Fatalf("restored container: %s (%s), want running", st.State, st.Message)
	}
	n.T.Logf("restored: ticks %d…%d (checkpoint after tick %d)", ticks[0], LastOf(ticks), ck.Before)
}

// assertMarker checks that the file the app's container wrote on node 1
// before the checkpoint is in the restored container.
func (p *CRIPod) AssertMarker() {
	p.N.T.Helper()
	if got := p.Exec("/bin/cat", "/marker"); got != "carried\n" {
		p.N.T.Errorf("/marker in the restored container: %q, want the checkpoint's rootfs change", got)
	}
}
