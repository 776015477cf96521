package k8s

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

func TestCRIRestore(t *testing.T) {
	start := time.Now()
	reg := harness.StartRegistry(t)
	ck := harness.CheckpointOnNode1(t, reg, reg.Addr+"/cryo/app:v1")
	t.Logf("node 1: checkpoint, build and push in %s", time.Since(start).Round(time.Millisecond))

	// Node 2's shims inherit containerd's environment: their own image
	// store and restore work directory, as on another machine, and the
	// node's opt-in to restores from annotations: the pods' namespace may
	// restore from the registry's ckpt/ repositories (plain HTTP).
	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	harness.UsePolicy(t, harness.AllowOnly("default", []string{reg.Addr + "/ckpt/"}, reg.Addr))
	n2 := harness.StartCRINodeAt(t, 1)
	for _, c := range []struct {
		name string
		run  func(*harness.CRINode, harness.CRICheckpoint)
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
			c.run(n2.With(t), ck)
			t.Logf("%s took %s", c.name, time.Since(began).Round(time.Millisecond))
		})
	}
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

// testCRIRestoreAnnotation: a new cryo pod on node 2 whose annotation names
// the checkpoint image by digest, with a container of the app's ordinary image,
// continues from the checkpointed tick (not from the start, and with its
// CUDA state resumed: FakeTicks checks every tick), with the file it wrote
// before the checkpoint (the kubelet archive's rootfs diff).
func testCRIRestoreAnnotation(n *harness.CRINode, ck harness.CRICheckpoint) {
	p := n.NewPod("restored", harness.CRIHandler, map[string]string{imagerestore.AnnImage: ck.Ref})
	if err := p.Create(harness.TestImage); err != nil {
		n.T.Fatal(err)
	}
	if err := p.Start(); err != nil {
		n.T.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
	}
	n.AssertContinues(p, ck)
	p.AssertMarker()
	harness.WantDigestLogged(n.T, n.Log(), ck.Ref)
	p.Remove()
}
