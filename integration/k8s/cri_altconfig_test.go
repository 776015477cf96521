package k8s

import (
	"path/filepath"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// testCRICryoRuncBinary evaluates the alternative configuration: the stock
// runc shim (io.containerd.runc.v2) with cryo-runc as its runc binary
// (BinaryName). CRI then gives runc its checkpoint options and work path,
// and cryo-runc does cryo's checkpoint and a CUDA-aware restore. A pod of
// each configuration is checkpointed through CRI, side by side, and both
// times are logged; cryo-runc's archive, and the cryo shim's from node 1,
// are then restored by containerd's CRI restore in new pods of that
// configuration.
func testCRICryoRuncBinary(n *harness.CRINode, ck harness.CRICheckpoint) {
	t := n.T
	n.PullImage(ck.App)
	took := map[string]time.Duration{}
	var src harness.CRICheckpoint
	for _, h := range []string{harness.CRIHandler, harness.CRICryoRuncHandler} {
		p := n.RunPodOf("alt-"+h, h, ck.App)
		archive := filepath.Join(n.Dir, "checkpoint-alt-"+h+".tar")
		before := harness.CtrdLastTick(t, p.LogPath())
		took[h] = p.Checkpoint(archive)
		n.WaitTicksIn(p.LogPath(), 2)
		if m := archiveManifest(t, archive); len(m.Processes) != 1 {
			t.Fatalf("%s: manifest lists %d CUDA processes, want 1", h, len(m.Processes))
		}
		src = harness.CRICheckpoint{Archive: archive, Before: before, After: harness.CtrdLastTick(t, p.LogPath())}
		p.Remove()
	}
	t.Logf("CheckpointContainer: cryo shim %s, runc shim with cryo-runc %s",
		took[harness.CRIHandler].Round(time.Millisecond), took[harness.CRICryoRuncHandler].Round(time.Millisecond))

	// Its own archive, and node 1's archive of the cryo shim: with
	// cryo-runc as runc's binary, a runc pod restores a cryo checkpoint
	// with its CUDA state resumed instead of hanging (see RuncPod).
	for name, c := range map[string]harness.CRICheckpoint{"alt-restored": src, "alt-from-shim": ck} {
		p := n.NewPod(name, harness.CRICryoRuncHandler, nil)
		if err := p.Create(c.Archive); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
		}
		n.AssertContinues(p, c)
		p.Remove()
	}
}
