package gpu

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

func TestGPUCRIPodToPod(t *testing.T) {
	uuids := gpuUUIDs(t, 1) // skips without a GPU
	// Onto GPU 1 where there is one; a one-GPU host restores onto GPU 0.
	target := min(1, len(uuids)-1)
	// The node's shims inherit containerd's environment: the image store
	// that `cryo image build` writes into below is the one they read, and
	// the policy that lets the pods' namespace restore from its repository.
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	t.Setenv("CRYO_IMAGE_STORE", store)
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	harness.UsePolicy(t, harness.AllowOnly("default", []string{"localhost/ckpt"}))
	n := startGPUCRINode(t)

	ck := checkpointGPUPod(t, n, uuids[0])
	// A tag of the pinned repository that the store holds with the pinned
	// digest is used without a pull: no registry is needed.
	ck.Tag = "localhost/ckpt/gpu-pod:v1"
	took := harness.Timed(t, []string{"CRYO_IMAGE_STORE=" + store}, harness.CryoBin(t, "cryo"), "image", "build", ck.Archive, ck.Tag)
	report(t, "cryo image build of the CRI archive", took)
	ck.Ref = "localhost/ckpt/gpu-pod@" + storedDigest(t, store, ck.Tag)

	p := n.NewPod("gpu-restored", harness.CRIHandler, map[string]string{imagerestore.AnnImage: ck.Ref})
	if err := p.CreateWith(p.GPUConfig(t, target)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Start(); err != nil {
		t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
	}
	got := harness.WaitTicks(t, p.Output, 0, "the restored pod's first ticks")
	report(t, fmt.Sprintf("restore of a new pod onto GPU %d to first output", target), time.Since(start))
	p.AssertGPUContinues(t, ck, got, uuids[target])
	p.Remove()
}

// checkpointGPUPod runs the CUDA workload in a cryo pod on GPU 0,
// checkpoints it through CRI, and removes the pod once it has ticked on
// after the checkpoint, as the kubelet would after a migration.
func checkpointGPUPod(t *testing.T, n *harness.CRINode, gpu0 string) harness.CRICheckpoint {
	p := n.NewPod("gpu-source", harness.CRIHandler, nil)
	if err := p.CreateWith(p.GPUConfig(t, 0)); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
	}
	harness.WaitTicks(t, p.Output, 2, "the pod's first ticks on GPU 0")
	p.AssertOn(t, gpu0)
	ck := harness.CRICheckpoint{Archive: filepath.Join(n.Dir, "checkpoint-gpu.tar")}
	ck.Before = harness.LastTick(t, p.Output())
	report(t, "CRI CheckpointContainer on GPU 0", p.Checkpoint(ck.Archive))
	// The kubelet's checkpoint leaves the container running, its CUDA
	// state resumed: the workload verifies it on the next ticks.
	ck.After = harness.WaitTicks(t, p.Output, ck.Before+2, "ticks after the checkpoint")
	p.Remove()
	t.Logf("checkpoint after tick %d; the source pod printed up to tick %d", ck.Before, ck.After)
	return ck
}

// startGPUCRINode starts a CRI node on the host's driver, with the CUDA
// workload's image and a pause image made of the GPU rootfs (the fake
// driver's files, of which the other CRI tests' images are made, are not
// on a GPU host).
func startGPUCRINode(t *testing.T) *harness.CRINode {
	t.Helper()
	n := harness.BootCRINode(t, 0, true)
	n.ImportImages(gpuRootfs(t, n.ImageDir()), map[string][]string{harness.GPUImage: {"/bin/cudamem"}})
	return n
}

// TestGPUCRICheckpointPaths times the kubelet's checkpoint of the same GPU
// pod through the two node configurations docs/kubernetes.md compares,
// side by side in one run: the cryo RuntimeClass (containerd gives a
// runtime other than runc.v2 no image path, so the shim writes a
// temporary directory that containerd then packs), and the stock runc
// shim with cryo-runc as its binary (containerd gives runc the image and
// work path). Each pod must run on with CUDA resumed.
func TestGPUCRICheckpointPaths(t *testing.T) {
	uuids := gpuUUIDs(t, 1)
	n := startGPUCRINode(t)
	for _, handler := range []string{harness.CRIHandler, harness.CRICryoRuncHandler} {
		p := n.NewPod("gpu-"+handler, handler, nil)
		if err := p.CreateWith(p.GPUConfig(t, 0)); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
		}
		harness.WaitTicks(t, p.Output, 2, "the pod's first ticks ("+handler+")")
		p.AssertOn(t, uuids[0])
		before := harness.LastTick(t, p.Output())
		archive := filepath.Join(n.Dir, "checkpoint-"+handler+".tar")
		report(t, "CRI CheckpointContainer through handler "+handler, p.Checkpoint(archive))
		harness.WaitTicks(t, p.Output, before+2, "ticks after the checkpoint ("+handler+")")
		p.Remove()
	}
}
