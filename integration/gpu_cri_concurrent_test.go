package integration

// Two pods restored at once from one checkpoint onto the same GPU, through
// CRI as the kubelet drives it (issue 42's one-GPU case): a replica set
// scaled up from a checkpoint starts its pods together.

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

// TestGPUCRIConcurrentRestore checkpoints one CUDA pod on GPU 0, builds
// its checkpoint image, then creates and starts two new pods annotated
// with it, concurrently, both given GPU 0. Each must carry the workload on
// from the checkpoint, with its device memory intact (cudamem checks its
// buffer every tick), on GPU 0; the time from each pod's restore request
// (its CreateContainer, where the shim checks and unpacks the image) to
// its first output is reported. About a minute on an H200.
func TestGPUCRIConcurrentRestore(t *testing.T) {
	uuids := gpuUUIDs(t, 1) // skips without a GPU
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	t.Setenv("CRYO_IMAGE_STORE", store)
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	usePolicy(t, allowOnly("default", []string{"localhost/ckpt"}))
	n := startGPUCRINode(t)

	ck := checkpointGPUPod(t, n, uuids[0])
	ck.tag = "localhost/ckpt/gpu-pod-twice:v1"
	report(t, "cryo image build of the CRI archive", timed(t, []string{"CRYO_IMAGE_STORE=" + store}, cryoBin(t, "cryo"), "image", "build", ck.archive, ck.tag))
	ck.ref = "localhost/ckpt/gpu-pod-twice@" + storedDigest(t, store, ck.tag)

	pods := []*criPod{
		n.newPod("gpu-twice-a", criHandler, map[string]string{imagerestore.AnnImage: ck.ref}),
		n.newPod("gpu-twice-b", criHandler, map[string]string{imagerestore.AnnImage: ck.ref}),
	}
	took := make([]time.Duration, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		cfg := p.gpuConfig(t, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			took[i], errs[i] = restoreToFirstOutput(p, cfg)
		}()
	}
	wg.Wait()
	for i, p := range pods {
		if errs[i] != nil {
			t.Fatalf("pod %s: %v\n%s", p.name, errs[i], lastLines(n.log(), 40))
		}
		report(t, fmt.Sprintf("concurrent restore %d of 2 onto GPU 0 to first output", i+1), took[i])
	}
	for _, p := range pods {
		p.assertGPUContinues(t, ck, lastTick(t, p.output()), uuids[0])
	}
	for _, p := range pods {
		p.remove()
	}
}

// restoreToFirstOutput creates and starts the restored pod's container
// and waits for its first tick, returning the time from the create: it
// runs beside another, so it reports errors rather than fail the test.
func restoreToFirstOutput(p *criPod, cfg *criapi.ContainerConfig) (time.Duration, error) {
	start := time.Now()
	if err := p.createWith(cfg); err != nil {
		return 0, err
	}
	if err := p.start(); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if firstTick(p.output()) > 0 {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("no tick within 2 minutes of the restore request:\n%s", tail(p.output(), 20))
}
