package integration

// A runnable checkpoint image is restored from the manifest the pod named,
// and only if that manifest carries the checkpoint its config names.
// containerd names an image by its config's digest (the image ID) and
// records as a CRI container's image the first reference of that ID, tags
// before digests: a tenant who copies another's config and layers into a
// manifest of their own parts, and has it pulled on the node, must not get
// the victim's pods to restore the tenant's memory, nor their own pods to
// restore the victim's. Each restore is told apart by the restored tick.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/cryo-gpu/cryo/internal/ociimage"
)

func TestRunnableBinding(t *testing.T) {
	reg := startRegistry(t)
	ckV, ckA := twoCheckpointsOnNode1(t, reg, reg.addr+"/cryo/app:v1")
	builder := newNode(t, nil)
	victim := buildRunnable(t, builder, ckV, reg.addr+"/ckpt/victim:v1")
	other := buildRunnable(t, builder, ckA, reg.addr+"/ckpt/other:v1")
	attacker := craftBorrowedConfig(t, reg.addr+"/ckpt/attacker", "v1", victim, other)
	old := craftUnbound(t, reg.addr+"/ckpt/old", "v1", victim)
	t.Run("CLI", func(t *testing.T) { testBindingCLI(t, attacker, old) })

	dir := t.TempDir()
	t.Setenv("CRYO_IMAGE_STORE", filepath.Join(dir, "store"))
	t.Setenv("CRYO_RESTORE_DIR", filepath.Join(dir, "restore"))
	n2 := startCRINodeAt(t, 1)
	t.Run("ImageIDs", func(t *testing.T) {
		n := n2.with(t)
		n.pullImage(victim)
		n.pullImage(other)
		if v, o := n.imageID(victim), n.imageID(other); v == o {
			t.Fatalf("two runnable images of two checkpoints share image ID %s", v)
		}
	})
	t.Run("BorrowedConfig", func(t *testing.T) {
		n := n2.with(t)
		n.pullImage(attacker)
		if v, a := n.imageID(victim), n.imageID(attacker); v != a {
			t.Fatalf("the crafted image's ID %s is not the victim's %s: the test does not craft what it means to", a, v)
		}
		p := n.newPod("victim", criHandler, nil)
		if err := p.createWith(p.kubeletConfig(victim)); err != nil {
			t.Fatal(err)
		}
		if rec := n.containerRecordImage(p.container); rec != attacker {
			t.Fatalf("containerd recorded %s as the victim's image, not the attacker's tag: the test does not reach the confusion", rec)
		}
		if err := p.start(); err != nil {
			t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
		}
		n.assertRestoredFrom(p, ckV, ckA)
		p.remove()

		p = n.newPod("attacker", criHandler, nil)
		n.assertPartsRefused(p, p.kubeletConfig(attacker))
		// containerd 1.7's CRI (and a client that names no image of its
		// own) sets the image name to the record's, the attacker's tag:
		// the victim's pod is refused, never given the attacker's parts.
		p = n.newPod("victim-1-7", criHandler, nil)
		n.assertPartsRefused(p, p.appConfig(victim))
	})
	t.Run("BuiltBeforeTheLabel", func(t *testing.T) {
		n := n2.with(t)
		n.pullImage(old)
		p := n.newPod("old", criHandler, nil)
		n.assertRefused(p, p.kubeletConfig(old), ociimage.ErrPartsUnbound.Error())
	})
	t.Run("RetaggedTag", func(t *testing.T) {
		n := n2.with(t)
		moving := reg.addr + "/ckpt/moving:v1"
		retag(t, victim, moving)
		n.pullImage(moving)
		retag(t, other, moving) // pushed, not yet pulled
		p := n.newPod("moving-before", criHandler, nil)
		n.assertRestores(p, p.kubeletConfig(moving), ckV, ckA)
		n.pullImage(moving)
		p = n.newPod("moving-after", criHandler, nil)
		n.assertRestores(p, p.kubeletConfig(moving), ckA, ckV)
	})
	assertNoWorkDirs(t, filepath.Join(dir, "restore"))
}

// testBindingCLI: the CLI, which reads an image by the name it stored it
// under, refuses a manifest whose parts its config does not name, and
// still reads an image built before the label.
func testBindingCLI(t *testing.T, attacker, old string) {
	n := newNode(t, nil)
	n.cryo(t, "image", "pull", attacker)
	wantIn(t, n.cryoFails(t, "inspect", "--verify", attacker), ociimage.ErrPartsMismatch.Error(), "cryo image build --runnable")
	wantIn(t, n.cryoFails(t, "image", "export", attacker, filepath.Join(t.TempDir(), "a.tar")), ociimage.ErrPartsMismatch.Error())
	n.cryo(t, "image", "pull", old)
	n.cryo(t, "inspect", "--verify", old)
}

// twoCheckpointsOnNode1 checkpoints one pod of app twice, far enough apart
// that a restored tick says which checkpoint ran.
func twoCheckpointsOnNode1(t *testing.T, reg *imgRegistry, app string) (criCheckpoint, criCheckpoint) {
	n1 := startCRINodeAt(t, 0)
	n1.publishApp(app)
	p := n1.runPodOf("source", criHandler, app)
	p.exec("/bin/sh", "-c", "echo carried > /marker")
	var cks [2]criCheckpoint
	for i := range cks {
		ck := criCheckpoint{archive: fmt.Sprintf("%s/checkpoint-source-%d.tar", n1.dir, i), app: app, node1: n1}
		ck.before = ctrdLastTick(t, p.logPath())
		p.checkpoint(ck.archive)
		n1.waitTicksIn(p.logPath(), 2)
		ck.after = ctrdLastTick(t, p.logPath())
		time.Sleep(time.Second) // ten ticks between the two
		cks[i] = ck
	}
	p.remove()
	t.Logf("checkpoints after ticks %d and %d", cks[0].before, cks[1].before)
	return cks[0], cks[1]
}

// buildRunnable builds ck's archive as a runnable image, pushes it and
// returns it pinned by digest.
func buildRunnable(t *testing.T, builder *imgNode, ck criCheckpoint, ref string) string {
	wantIn(t, builder.cryo(t, "image", "build", "--runnable", ck.archive, ref), "built "+ref)
	return pinnedRef(ref, builder.cryo(t, "image", "push", ref))
}

// craftBorrowedConfig pushes, as repo:tag, a manifest
// with victim's config and file-system layers and other's checkpoint
// parts and annotations: what a tenant who can read the victim's image
// (not its parts) builds to share its image ID.
func craftBorrowedConfig(t *testing.T, repo, tag, victim, other string) string {
	dst := plainRepo(t, repo+":"+tag)
	manV, srcV := fetchManifest(t, victim)
	manO, srcO := fetchManifest(t, other)
	var layers []ocispec.Descriptor
	for _, l := range manV.Layers {
		if !isCheckpointBlob(l) {
			layers = append(layers, l)
			copyBlob(t, srcV, dst, l)
		}
	}
	for _, l := range manO.Layers {
		if isCheckpointBlob(l) {
			layers = append(layers, l)
			copyBlob(t, srcO, dst, l)
		}
	}
	copyBlob(t, srcV, dst, manV.Config)
	pushManifest(t, dst, tag, ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: manV.Config, Layers: layers, Annotations: manO.Annotations})
	return repo + ":" + tag
}

// isCheckpointBlob: a checkpoint part, compressed or a pages blob.
func isCheckpointBlob(l ocispec.Descriptor) bool {
	return l.MediaType == ociimage.MediaTypeCheckpointPart || l.MediaType == ociimage.MediaTypeCheckpointPages
}

// craftUnbound pushes victim as repo:tag with its config's parts label
// taken out: an image as a cryo before the label built it.
func craftUnbound(t *testing.T, repo, tag, victim string) string {
	man, src := fetchManifest(t, victim)
	dst := plainRepo(t, repo+":"+tag)
	for _, l := range man.Layers {
		copyBlob(t, src, dst, l)
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
	pushManifest(t, dst, tag, man)
	return repo + ":" + tag
}

// retag points the tag ref at pinned's manifest in the registry.
func retag(t *testing.T, pinned, ref string) {
	man, src := fetchManifest(t, pinned)
	dst := plainRepo(t, ref)
	for _, l := range append(man.Layers, man.Config) {
		copyBlob(t, src, dst, l)
	}
	pushManifest(t, dst, ref[strings.LastIndex(ref, ":")+1:], man)
}

func pushManifest(t *testing.T, dst *remote.Repository, tag string, man ocispec.Manifest) {
	t.Helper()
	data, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := dst.PushReference(context.Background(), d, bytes.NewReader(data), tag); err != nil {
		t.Fatalf("push the manifest as %s: %v", tag, err)
	}
}

// plainRepo is ref's repository over plain HTTP, with the private
// registry's login (sent only where a registry asks for one).
func plainRepo(t *testing.T, ref string) *remote.Repository {
	t.Helper()
	repo, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	repo.Client = &auth.Client{Credential: func(context.Context, string) (auth.Credential, error) {
		return auth.Credential{Username: privateUser, Password: privatePassword}, nil
	}}
	return repo
}

func fetchManifest(t *testing.T, ref string) (ocispec.Manifest, *remote.Repository) {
	t.Helper()
	repo := plainRepo(t, ref)
	_, data, err := oras.FetchBytes(context.Background(), repo, ref, oras.DefaultFetchBytesOptions)
	if err != nil {
		t.Fatalf("fetch %s: %v", ref, err)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(data, &man); err != nil {
		t.Fatal(err)
	}
	return man, repo
}

func copyBlob(t *testing.T, src, dst *remote.Repository, d ocispec.Descriptor) {
	t.Helper()
	ctx := context.Background()
	if ok, err := dst.Exists(ctx, d); err == nil && ok {
		return
	}
	rc, err := src.Fetch(ctx, d)
	if err != nil {
		t.Fatalf("fetch blob %s: %v", d.Digest, err)
	}
	defer rc.Close()
	if err := dst.Push(ctx, d, rc); err != nil {
		t.Fatalf("push blob %s: %v", d.Digest, err)
	}
}

// imageID is CRI's ID of a pulled image: its config's digest.
func (n *criNode) imageID(ref string) string {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	st, err := n.images.ImageStatus(ctx, &criapi.ImageStatusRequest{Image: &criapi.ImageSpec{Image: ref}})
	if err != nil || st.GetImage() == nil {
		n.t.Fatalf("CRI ImageStatus %s: %v", ref, err)
	}
	return st.GetImage().GetId()
}

// kubeletConfig is the container config the kubelet sends for a pod
// whose container names ref: the image ID it pulled, and the pod's own
// name for the image.
func (p *criPod) kubeletConfig(ref string) *criapi.ContainerConfig {
	cfg := p.appConfig(p.n.imageID(ref))
	cfg.Image.UserSpecifiedImage = ref
	return cfg
}

// containerRecordImage is the image containerd's container record names.
func (n *criNode) containerRecordImage(id string) string {
	n.t.Helper()
	var rec struct{ Image string }
	if err := json.Unmarshal([]byte(n.ctrIn(criNamespace, "containers", "info", id)), &rec); err != nil {
		n.t.Fatal(err)
	}
	return rec.Image
}

// assertRestores creates and starts a container of cfg and checks that it
// restored ck, not other.
func (n *criNode) assertRestores(p *criPod, cfg *criapi.ContainerConfig, ck, other criCheckpoint) {
	n.t.Helper()
	if err := p.createWith(cfg); err != nil {
		n.t.Fatal(err)
	}
	if err := p.start(); err != nil {
		n.t.Fatalf("%v\n%s", err, lastLines(n.log(), 40))
	}
	n.assertRestoredFrom(p, ck, other)
	p.remove()
}

// assertRestoredFrom: the restored app continues from ck, not from other.
func (n *criNode) assertRestoredFrom(p *criPod, ck, other criCheckpoint) {
	n.t.Helper()
	n.assertContinues(p, ck)
	if first := ctrdTicks(n.t, p.logPath())[0]; first > other.before && first <= other.after+1 {
		n.t.Fatalf("restored tick %d is the other checkpoint's (after tick %d)", first, other.before)
	}
	p.assertMarker()
}

// assertPartsRefused: a container of cfg is refused before anything is
// restored, saying its parts are not those its config names, and prints
// no tick.
func (n *criNode) assertPartsRefused(p *criPod, cfg *criapi.ContainerConfig) {
	n.t.Helper()
	n.assertRefused(p, cfg, ociimage.ErrPartsMismatch.Error())
}

// assertRefused: a container of cfg is refused before anything is
// restored, for reason, naming the container and the remedy.
func (n *criNode) assertRefused(p *criPod, cfg *criapi.ContainerConfig, reason string) {
	n.t.Helper()
	if err := p.createWith(cfg); err != nil {
		n.t.Fatal(err)
	}
	err := p.start()
	if err == nil {
		n.t.Fatalf("pod %s restored from a manifest whose parts its config does not name; ticks %v", p.name, ctrdTicks(n.t, p.logPath()))
	}
	wantIn(n.t, err.Error(), reason, "container app (", "cryo image build --runnable")
	n.t.Logf("refused: %v", err)
	if ticks := ctrdTicks(n.t, p.logPath()); len(ticks) != 0 {
		n.t.Errorf("refused pod %s printed ticks %v", p.name, ticks)
	}
	p.remove()
}
