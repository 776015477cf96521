package integration

// The Kubernetes restore on a real GPU host with the image model: a cryo
// pod on GPU 0 is checkpointed through CRI, the archive is built into a
// runnable checkpoint image on the application's image and pushed to a
// registry on loopback; a new pod whose container image IS that checkpoint
// (pulled through CRI, as the kubelet pulls it) and whose container was
// given GPU 0 again (every host) or GPU 1 (a host with two) carries the
// workload on there. A pod given no GPU gets none: its restore is refused.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGPUCRIRunnable(t *testing.T) {
	uuids := gpuUUIDs(t, 1) // skips without a GPU
	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	reg := startRegistry(t)
	n := startGPUCRINode(t)
	base := reg.addr + "/cryo/gpu:v1"
	n.ctrIn(criNamespace, "images", "tag", gpuImage, base)
	n.ctrIn(criNamespace, "images", "push", "--plain-http", base)

	ck := checkpointGPUPod(t, n, uuids[0])
	ref := reg.addr + "/ckpt/gpu-runnable:v1"
	env := []string{"CRYO_IMAGE_STORE=" + filepath.Join(dir, "store")}
	report(t, "cryo image build --runnable of the CRI archive", timed(t, env, cryoBin(t, "cryo"), "image", "build", "--runnable", "--base", base, ck.archive, ref))
	out := run(t, 5*time.Minute, env, cryoBin(t, "cryo"), "image", "push", ref)
	pinned := reg.addr + "/ckpt/gpu-runnable@" + lastLine(out)
	start := time.Now()
	n.pullImage(pinned)
	report(t, "CRI PullImage of the runnable image", time.Since(start))

	onto := func(gpu int) func(*testing.T) {
		return func(t *testing.T) {
			p := n.newPod(fmt.Sprintf("gpu-runnable-%d", gpu), criHandler, nil)
			cfg := p.gpuConfig(t, gpu)
			cfg.Image.Image = pinned
			if err := p.createWith(cfg); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := p.start(); err != nil {
				t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
			}
			got := waitTicks(t, p.output, 0, "the restored pod's first ticks")
			report(t, fmt.Sprintf("restore from the pod's own image onto GPU %d to first output", gpu), time.Since(start))
			p.assertGPUContinues(t, ck, got, uuids[gpu])
			p.remove()
		}
	}
	t.Run("OntoGPU0", onto(0))
	t.Run("OntoGPU1", func(t *testing.T) {
		if len(uuids) < 2 {
			t.Skipf("this host has %d GPU; moving onto another needs 2", len(uuids))
		}
		onto(1)(t)
	})
	t.Run("NoGPUGetsNone", func(t *testing.T) {
		p := n.newPod("gpu-runnable-none", criHandler, nil)
		cfg := p.gpuConfig(t, 0)
		cfg.Image.Image = pinned
		cfg.Devices = nil
		err := p.createWith(cfg)
		if err == nil {
			err = p.start()
		}
		if err == nil {
			t.Fatalf("a pod given no GPU restored a GPU checkpoint")
		}
		if !strings.Contains(err.Error(), "GPU") {
			t.Errorf("the refusal does not name the GPU: %v", err)
		}
		t.Logf("refused: %v", err)
		p.remove()
	})
}
