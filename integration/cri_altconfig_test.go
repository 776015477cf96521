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
// times are logged; cryo-runc's archive, and the cryo shim's from node 1,
// are then restored by containerd's CRI restore in new pods of that
// configuration.
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

	// Its own archive, and node 1's archive of the cryo shim: with
	// cryo-runc as runc's binary, a runc pod restores a cryo checkpoint
	// with its CUDA state resumed instead of hanging (see RuncPod).
	for name, c := range map[string]criCheckpoint{"alt-restored": src, "alt-from-shim": ck} {
		p := n.newPod(name, criCryoRuncHandler, nil)
		if err := p.create(c.archive); err != nil {
			t.Fatal(err)
		}
		if err := p.start(); err != nil {
			t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
		}
		n.assertContinues(p, c)
		p.remove()
	}
}
