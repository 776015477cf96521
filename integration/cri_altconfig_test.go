package integration

import (
	"path/filepath"
	"time"
)

// testCRICryoRuncBinary evaluates the alternative configuration: the stock
// runc shim (io.containerd.runc.v2) with cryo-runc as its runc binary
// (BinaryName). CRI then gives runc its checkpoint options and work path,
// and cryo-runc does cryo's checkpoint and a CUDA-aware restore. A pod of
// each configuration is checkpointed through CRI, side by side, and both
// times are logged; the archive of cryo-runc's is then restored by
// containerd's CRI restore in a new pod of that configuration.
func testCRICryoRuncBinary(n *criNode, ck criCheckpoint) {
	t := n.t
	n.pullImage(ck.app)
	took := map[string]time.Duration{}
	var src criCheckpoint
	for _, h := range []string{criHandler, criCryoRuncHandler} {
		p := n.runPodOf("alt-"+h, h, ck.app)
		archive := filepath.Join(n.dir, "checkpoint-alt-"+h+".tar")
		before := ctrdLastTick(t, p.logPath())
		took[h] = p.checkpoint(archive)
		n.waitTicksIn(p.logPath(), 2)
		if m := archiveManifest(t, archive); len(m.Processes) != 1 {
			t.Fatalf("%s: manifest lists %d CUDA processes, want 1", h, len(m.Processes))
		}
		src = criCheckpoint{archive: archive, before: before, after: ctrdLastTick(t, p.logPath())}
		p.remove()
	}
	t.Logf("CheckpointContainer: cryo shim %s, runc shim with cryo-runc %s",
		took[criHandler].Round(time.Millisecond), took[criCryoRuncHandler].Round(time.Millisecond))

	p := n.newPod("alt-restored", criCryoRuncHandler, nil)
	if err := p.create(src.archive); err != nil {
		t.Fatal(err)
	}
	if err := p.start(); err != nil {
		t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
	}
	n.assertContinues(p, src)
	p.remove()
}
