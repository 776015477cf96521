package integration

import (
	"sync"
	"time"

	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
)

// testCRIRestoreTwice: two pods annotated with the same checkpoint image
// are created and started at once, as a replica set scaled up from a
// checkpoint starts them, on the fake driver's GPU (TestGPUCRIConcurrentRestore
// is the same on a real one). Each continues from the checkpoint, and each
// ran its post-restore hook, named by a pod annotation that CRI copies into
// the container's spec through pod_annotations, once its CUDA ran again.
func testCRIRestoreTwice(n *criNode, ck criCheckpoint) {
	ann := map[string]string{
		imagerestore.AnnImage: ck.ref,
		hook.AnnPostRestore:   `exec:["/bin/sh","-c","echo woke > /woke"]`,
	}
	pods := []*criPod{n.newPod("twice-a", criHandler, ann), n.newPod("twice-b", criHandler, ann)}
	errs := make([]error, len(pods))
	took := make([]time.Duration, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			if errs[i] = p.create(testImage); errs[i] == nil {
				errs[i] = p.start()
			}
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, p := range pods {
		if errs[i] != nil {
			n.t.Fatalf("pod %s: %v\n%s", p.name, errs[i], lastLines(n.log(), 40))
		}
		n.t.Logf("pod %s: created and started in %s", p.name, took[i].Round(time.Millisecond))
	}
	if l := logLine(n.log(), "post-restore hook failed"); l >= 0 {
		n.t.Fatalf("a post-restore hook failed:\n%s", lastLines(n.log(), 40))
	}
	for _, p := range pods {
		n.assertContinues(p, ck)
		if got := p.exec("/bin/cat", "/woke"); got != "woke\n" {
			n.t.Errorf("pod %s: /woke is %q: the post-restore hook did not run", p.name, got)
		}
		p.remove()
	}
}
