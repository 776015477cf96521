package gpu

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
	harness.UsePolicy(t, harness.AllowOnly("default", []string{"localhost/ckpt"}))
	n := startGPUCRINode(t)

	ck := checkpointGPUPod(t, n, uuids[0])
	ck.Tag = "localhost/ckpt/gpu-pod-twice:v1"
	report(t, "cryo image build of the CRI archive", harness.Timed(t, []string{"CRYO_IMAGE_STORE=" + store}, harness.CryoBin(t, "cryo"), "image", "build", ck.Archive, ck.Tag))
	ck.Ref = "localhost/ckpt/gpu-pod-twice@" + storedDigest(t, store, ck.Tag)

	pods := []*harness.CRIPod{
		n.NewPod("gpu-twice-a", harness.CRIHandler, map[string]string{imagerestore.AnnImage: ck.Ref}),
		n.NewPod("gpu-twice-b", harness.CRIHandler, map[string]string{imagerestore.AnnImage: ck.Ref}),
	}
	took := make([]time.Duration, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		cfg := p.GPUConfig(t, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			took[i], errs[i] = restoreToFirstOutput(p, cfg)
		}()
	}
	wg.Wait()
	for i, p := range pods {
		if errs[i] != nil {
			t.Fatalf("pod %s: %v\n%s", p.Name, errs[i], harness.LastLines(n.Log(), 40))
		}
		report(t, fmt.Sprintf("concurrent restore %d of 2 onto GPU 0 to first output", i+1), took[i])
	}
	for _, p := range pods {
		p.AssertGPUContinues(t, ck, harness.LastTick(t, p.Output()), uuids[0])
	}
	for _, p := range pods {
		p.Remove()
	}
}

// restoreToFirstOutput creates and starts the restored pod's container
// and waits for its first tick, returning the time from the create: it
// runs beside another, so it reports errors rather than fail the test.
func restoreToFirstOutput(p *harness.CRIPod, cfg *criapi.ContainerConfig) (time.Duration, error) {
	start := time.Now()
	if err := p.CreateWith(cfg); err != nil {
		return 0, err
	}
	if err := p.Start(); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if harness.FirstTick(p.Output()) > 0 {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("no tick within 2 minutes of the restore request:\n%s", harness.Tail(p.Output(), 20))
}
