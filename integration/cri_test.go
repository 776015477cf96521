package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/snapshot"
)

// TestCRI drives containerd 2.x's CRI plugin the way the kubelet does,
// with pods in cryo's RuntimeClass (handler "cryo"). The subtests share
// one node.
func TestCRI(t *testing.T) {
	start := time.Now()
	n := startCRINode(t)
	t.Logf("CRI node ready in %s", time.Since(start).Round(time.Millisecond))
	t.Run("CheckpointContainer", func(t *testing.T) { testCRICheckpoint(n.with(t)) })
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

// with returns the node bound to a subtest's testing.T.
func (n *criNode) with(t testing.TB) *criNode {
	c := *n
	c.daemon = n.daemon.with(t)
	return &c
}

// testCRICheckpoint: CRI's CheckpointContainer (the kubelet's checkpoint
// API) of a CUDA container in a cryo pod writes an archive that holds the
// GPU manifest inside CRIU's images, with CRIU's log and statistics; the
// container runs on, its CUDA state resumed.
func testCRICheckpoint(n *criNode) {
	t := n.t
	p := n.runPod("ckpt", criHandler)
	location := filepath.Join(n.dir, "checkpoint-ckpt.tar")
	took := p.checkpoint(location)
	t.Logf("CheckpointContainer took %s", took.Round(time.Millisecond))

	n.waitTicksIn(p.logPath(), 3) // ticks go on, with CUDA running (fakeTicks checks)
	if st := p.status(); st.State != criapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container after checkpoint: %s, want running", st.State)
	}
	files := archiveFiles(t, location)
	for _, name := range []string{"checkpoint/" + snapshot.ManifestName, "checkpoint/inventory.img",
		"checkpoint/dump.log", "checkpoint/stats-dump", "config.dump", "spec.dump"} {
		if _, ok := files[name]; !ok {
			t.Errorf("archive lacks %s; it holds %v", name, files)
		}
	}
	m := archiveManifest(t, location)
	if len(m.Processes) != 1 || len(m.Digests) == 0 {
		t.Fatalf("manifest: %d CUDA processes, %d digests; want 1 and some", len(m.Processes), len(m.Digests))
	}
	if fi, err := os.Stat(location); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("archive %s: %v; want mode 0600", location, err)
	}
	p.remove()
}
