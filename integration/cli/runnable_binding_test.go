package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

func TestRunnableBinding(t *testing.T) {
	reg := harness.StartRegistry(t)
	ckV, ckA := twoCheckpointsOnNode1(t, reg, reg.Addr+"/cryo/app:v1")
	builder := harness.NewNode(t, nil)
	victim := buildRunnable(t, builder, ckV, reg.Addr+"/ckpt/victim:v1")
	other := buildRunnable(t, builder, ckA, reg.Addr+"/ckpt/other:v1")
	attacker := harness.CraftBorrowedConfig(t, reg.Addr+"/ckpt/attacker", "v1", victim, other)
	old := craftUnbound(t, reg.Addr+"/ckpt/old", "v1", victim)
	t.Run("CLI", func(t *testing.T) { testBindingCLI(t, attacker, old) })

	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	n2 := harness.StartCRINodeAt(t, 1)
	t.Run("ImageIDs", func(t *testing.T) {
		n := n2.With(t)
		n.PullImage(victim)
		n.PullImage(other)
		if v, o := n.ImageID(victim), n.ImageID(other); v == o {
			t.Fatalf("two runnable images of two checkpoints share image ID %s", v)
		}
	})
	t.Run("BorrowedConfig", func(t *testing.T) {
		n := n2.With(t)
		n.PullImage(attacker)
		if v, a := n.ImageID(victim), n.ImageID(attacker); v != a {
			t.Fatalf("the crafted image's ID %s is not the victim's %s: the test does not craft what it means to", a, v)
		}
		p := n.NewPod("victim", harness.CRIHandler, nil)
		if err := p.CreateWith(p.KubeletConfig(victim)); err != nil {
			t.Fatal(err)
		}
		if rec := n.ContainerRecordImage(p.Container); rec != attacker {
			t.Fatalf("containerd recorded %s as the victim's image, not the attacker's tag: the test does not reach the confusion", rec)
		}
		if err := p.Start(); err != nil {
			t.Fatalf("%v\n%s", err, harness.LastLines(n.Log(), 40))
		}
		n.AssertRestoredFrom(p, ckV, ckA)
		p.Remove()

		p = n.NewPod("attacker", harness.CRIHandler, nil)
		n.AssertPartsRefused(p, p.KubeletConfig(attacker))
		// containerd 1.7's CRI (and a client that names no image of its
		// own) sets the image name to the record's, the attacker's tag:
		// the victim's pod is refused, never given the attacker's parts.
		p = n.NewPod("victim-1-7", harness.CRIHandler, nil)
		n.AssertPartsRefused(p, p.AppConfig(victim))
	})
	t.Run("BuiltBeforeTheLabel", func(t *testing.T) {
		n := n2.With(t)
		n.PullImage(old)
		p := n.NewPod("old", harness.CRIHandler, nil)
		n.AssertRefused(p, p.KubeletConfig(old), ociimage.ErrPartsUnbound.Error())
	})
	t.Run("RetaggedTag", func(t *testing.T) {
		n := n2.With(t)
		moving := reg.Addr + "/ckpt/moving:v1"
		retag(t, victim, moving)
		n.PullImage(moving)
		retag(t, other, moving) // pushed, not yet pulled
		p := n.NewPod("moving-before", harness.CRIHandler, nil)
		n.AssertRestores(p, p.KubeletConfig(moving), ckV, ckA)
		n.PullImage(moving)
		p = n.NewPod("moving-after", harness.CRIHandler, nil)
		n.AssertRestores(p, p.KubeletConfig(moving), ckA, ckV)
	})
	assertNoWorkDirs(t, filepath.Join(dir, "restore"))
}

// testBindingCLI: the CLI, which reads an image by the name it stored it
// under, refuses a manifest whose parts its config does not name, and
// still reads an image built before the label.
func testBindingCLI(t *testing.T, attacker, old string) {
	n := harness.NewNode(t, nil)
	n.Cryo(t, "image", "pull", attacker)
	harness.WantIn(t, n.CryoFails(t, "inspect", "--verify", attacker), ociimage.ErrPartsMismatch.Error(), "cryo image build --runnable")
	harness.WantIn(t, n.CryoFails(t, "image", "export", attacker, filepath.Join(t.TempDir(), "a.tar")), ociimage.ErrPartsMismatch.Error())
	n.Cryo(t, "image", "pull", old)
	n.Cryo(t, "inspect", "--verify", old)
}

// twoCheckpointsOnNode1 checkpoints one pod of app twice, far enough apart
// that a restored tick says which checkpoint ran.
func twoCheckpointsOnNode1(t *testing.T, reg *harness.ImgRegistry, app string) (harness.CRICheckpoint, harness.CRICheckpoint) {
	n1 := harness.StartCRINodeAt(t, 0)
	n1.PublishApp(app)
	p := n1.RunPodOf("source", harness.CRIHandler, app)
	p.Exec("/bin/sh", "-c", "echo carried > /marker")
	var cks [2]harness.CRICheckpoint
	for i := range cks {
		ck := harness.CRICheckpoint{Archive: fmt.Sprintf("%s/checkpoint-source-%d.tar", n1.Dir, i), App: app, Node1: n1}
		ck.Before = harness.CtrdLastTick(t, p.LogPath())
		p.Checkpoint(ck.Archive)
		n1.WaitTicksIn(p.LogPath(), 2)
		ck.After = harness.CtrdLastTick(t, p.LogPath())
		time.Sleep(time.Second) // ten ticks between the two
		cks[i] = ck
	}
	p.Remove()
	t.Logf("checkpoints after ticks %d and %d", cks[0].Before, cks[1].Before)
	return cks[0], cks[1]
}

// buildRunnable builds ck's archive as a runnable image, pushes it and
// returns it pinned by digest.
func buildRunnable(t *testing.T, builder *harness.ImgNode, ck harness.CRICheckpoint, ref string) string {
	harness.WantIn(t, builder.Cryo(t, "image", "build", "--runnable", ck.Archive, ref), "built "+ref)
	return harness.PinnedRef(ref, builder.Cryo(t, "image", "push", ref))
}

// craftUnbound pushes victim as repo:tag with its config's parts label
// taken out: an image as a cryo before the label built it.
func craftUnbound(t *testing.T, repo, tag, victim string) string {
	man, src := harness.FetchManifest(t, victim)
	dst := harness.PlainRepo(t, repo+":"+tag)
	for _, l := range man.Layers {
		harness.CopyBlob(t, src, dst, l)
	}
	data, err := content.FetchAll(context.Background(), src, man.Config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg.Config.Labels, ociimage.LabelParts)
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	man.Config = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := dst.Push(context.Background(), man.Config, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	harness.PushManifest(t, dst, tag, man)
	return repo + ":" + tag
}

// retag points the tag ref at pinned's manifest in the registry.
func retag(t *testing.T, pinned, ref string) {
	man, src := harness.FetchManifest(t, pinned)
	dst := harness.PlainRepo(t, ref)
	for _, l := range append(man.Layers, man.Config) {
		harness.CopyBlob(t, src, dst, l)
	}
	harness.PushManifest(t, dst, ref[strings.LastIndex(ref, ":")+1:], man)
}
