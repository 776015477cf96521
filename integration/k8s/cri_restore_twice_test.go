package k8s

import (
	"sync"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

// testCRIRestoreTwice: two pods annotated with the same checkpoint image
// are created and started at once, as a replica set scaled up from a
// checkpoint starts them, on the fake driver's GPU (TestGPUCRIConcurrentRestore
// is the same on a real one). Each continues from the checkpoint, and each
// ran its post-restore hook, named by a pod annotation that CRI copies into
// the container's spec through pod_annotations, once its CUDA ran again.
func testCRIRestoreTwice(n *harness.CRINode, ck harness.CRICheckpoint) {
	ann := map[string]string{
		imagerestore.AnnImage: ck.Ref,
		hook.AnnPostRestore:   `exec:["/bin/sh","-c","echo woke > /woke"]`,
	}
	pods := []*harness.CRIPod{n.NewPod("twice-a", harness.CRIHandler, ann), n.NewPod("twice-b", harness.CRIHandler, ann)}
	errs := make([]error, len(pods))
	took := make([]time.Duration, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if errs[i] = p.Create(harness.TestImage); errs[i] == nil {
				errs[i] = p.Start()
			}
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, p := range pods {
		if errs[i] != nil {
			n.T.Fatalf("pod %s: %v\n%s", p.Name, errs[i], harness.LastLines(n.Log(), 40))
		}
		n.T.Logf("pod %s: created and started in %s", p.Name, took[i].Round(time.Millisecond))
	}
	if l := harness.LogLine(n.Log(), "post-restore hook failed"); l >= 0 {
		n.T.Fatalf("a post-restore hook failed:\n%s", harness.LastLines(n.Log(), 40))
	}
	for _, p := range pods {
		n.AssertContinues(p, ck)
		if got := p.Exec("/bin/cat", "/woke"); got != "woke\n" {
			n.T.Errorf("pod %s: /woke is %q: the post-restore hook did not run", p.Name, got)
		}
		p.Remove()
	}
}
