package gpu

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

func TestGPUCRIRunnable(t *testing.T) {
	uuids := gpuUUIDs(t, 1) // skips without a GPU
	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	reg := harness.StartRegistry(t)
	n := startGPUCRINode(t)
	base := reg.Addr + "/cryo/gpu:v1"
	n.CtrIn(harness.CRINamespace, "images", "tag", harness.GPUImage, base)
	n.CtrIn(harness.CRINamespace, "images", "push", "--plain-http", base)

	ck := checkpointGPUPod(t, n, uuids[0])
	ref := reg.Addr + "/ckpt/gpu-runnable:v1"
	env := []string{"CRYO_IMAGE_STORE=" + filepath.Join(dir, "store")}
	report(t, "cryo image build --runnable of the CRI archive", harness.Timed(t, env, harness.CryoBin(t, "cryo"), "image", "build", "--runnable", "--base", base, ck.Archive, ref))
	out := harness.Run(t, 5*time.Minute, env, harness.CryoBin(t, "cryo"), "image", "push", ref)
	pinned := reg.Addr + "/ckpt/gpu-runnable@" + harness.LastLine(out)
	start := time.Now()
	n.PullImage(pinned)
	report(t, "CRI PullImage of the runnable image", time.Since(start))

	onto := func(gpu int) func(*testing.T) {
		return func(t *testing.T) {
			p := n.NewPod(fmt.Sprintf("gpu-runnable-%d", gpu), harness.CRIHandler, nil)
			cfg := p.GPUConfig(t, gpu)
			cfg.Image.Image = pinned
			if err := p.CreateWith(cfg); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := p.Start(); err != nil {
				t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
			}
			got := harness.WaitTicks(t, p.Output, 0, "the restored pod's first ticks")
			report(t, fmt.Sprintf("restore from the pod's own image onto GPU %d to first output", gpu), time.Since(start))
			p.AssertGPUContinues(t, ck, got, uuids[gpu])
			p.Remove()
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
		p := n.NewPod("gpu-runnable-none", harness.CRIHandler, nil)
		cfg := p.GPUConfig(t, 0)
		cfg.Image.Image = pinned
		cfg.Devices = nil
		err := p.CreateWith(cfg)
		if err == nil {
			err = p.Start()
		}
		if err == nil {
			t.Fatalf("a pod given no GPU restored a GPU checkpoint")
		}
		if !strings.Contains(err.Error(), "GPU") {
			t.Errorf("the refusal does not name the GPU: %v", err)
		}
		t.Logf("refused: %v", err)
		p.Remove()
	})
}
