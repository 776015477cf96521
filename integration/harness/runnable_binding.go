package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// CraftBorrowedConfig pushes, as repo:tag, a manifest
// with victim's config and file-system layers and other's checkpoint
// parts and annotations: what a tenant who can read the victim's image
// (not its parts) builds to share its image ID.
func CraftBorrowedConfig(t *testing.T, repo, tag, victim, other string) string {
	dst := PlainRepo(t, repo+":"+tag)
	manV, srcV := FetchManifest(t, victim)
	manO, srcO := FetchManifest(t, other)
	var layers []ocispec.Descriptor
	for _, l := range manV.Layers {
		if !isCheckpointBlob(l) {
			layers = append(layers, l)
			CopyBlob(t, srcV, dst, l)
		}
	}
	for _, l := range manO.Layers {
		if isCheckpointBlob(l) {
			layers = append(layers, l)
			CopyBlob(t, srcO, dst, l)
		}
	}
	CopyBlob(t, srcV, dst, manV.Config)
	PushManifest(t, dst, tag, ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: manV.Config, Layers: layers, Annotations: manO.Annotations})
	return repo + ":" + tag
}

// isCheckpointBlob: a checkpoint part, compressed or a pages blob.
func isCheckpointBlob(l ocispec.Descriptor) bool {
	return l.MediaType == ociimage.MediaTypeCheckpointPart || l.MediaType == ociimage.MediaTypeCheckpointPages
}

func PushManifest(t *testing.T, dst *remote.Repository, tag string, man ocispec.Manifest) {
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

// PlainRepo is ref's repository over plain HTTP, with the private
// registry's login (sent only where a registry asks for one).
func PlainRepo(t *testing.T, ref string) *remote.Repository {
	t.Helper()
	repo, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	repo.Client = &auth.Client{Credential: func(context.Context, string) (auth.Credential, error) {
		return auth.Credential{Username: PrivateUser, Password: PrivatePassword}, nil
	}}
	return repo
}

func FetchManifest(t *testing.T, ref string) (ocispec.Manifest, *remote.Repository) {
	t.Helper()
	repo := PlainRepo(t, ref)
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

func CopyBlob(t *testing.T, src, dst *remote.Repository, d ocispec.Descriptor) {
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
func (n *CRINode) ImageID(ref string) string {
	n.T.Helper()
	ctx, cancel := n.Ctx()
	defer cancel()
	st, err := n.images.ImageStatus(ctx, &criapi.ImageStatusRequest{Image: &criapi.ImageSpec{Image: ref}})
	if err != nil || st.GetImage() == nil {
		n.T.Fatalf("CRI ImageStatus %s: %v", ref, err)
	}
	return st.GetImage().GetId()
}

// kubeletConfig is the container config the kubelet sends for a pod
// whose container names ref: the image ID it pulled, and the pod's own
// name for the image.
func (p *CRIPod) KubeletConfig(ref string) *criapi.ContainerConfig {
	cfg := p.AppConfig(p.N.ImageID(ref))
	cfg.Image.UserSpecifiedImage = ref
	return cfg
}

// containerRecordImage is the image containerd's container record names.
func (n *CRINode) ContainerRecordImage(id string) string {
	n.T.Helper()
	var rec struct{ Image string }
	if err := json.Unmarshal([]byte(n.CtrIn(CRINamespace, "containers", "info", id)), &rec); err != nil {
		n.T.Fatal(err)
	}
	return rec.Image
}

// assertRestores creates and starts a container of cfg and checks that it
// restored ck, not other.
func (n *CRINode) AssertRestores(p *CRIPod, cfg *criapi.ContainerConfig, ck, other CRICheckpoint) {
	n.T.Helper()
	if err := p.CreateWith(cfg); err != nil {
		n.T.Fatal(err)
	}
	if err := p.Start(); err != nil {
		n.T.Fatalf("%v\n%s", err, LastLines(n.Log(), 40))
	}
	n.AssertRestoredFrom(p, ck, other)
	p.Remove()
}

// assertRestoredFrom: the restored app continues from ck, not from other.
func (n *CRINode) AssertRestoredFrom(p *CRIPod, ck, other CRICheckpoint) {
	n.T.Helper()
	n.AssertContinues(p, ck)
	if first := CtrdTicks(n.T, p.LogPath())[0]; first > other.Before && first <= other.After+1 {
		n.T.Fatalf("restored tick %d is the other checkpoint's (after tick %d)", first, other.Before)
	}
	p.AssertMarker()
}

// assertPartsRefused: a container of cfg is refused before anything is
// restored, saying its parts are not those its config names, and prints
// no tick.
func (n *CRINode) AssertPartsRefused(p *CRIPod, cfg *criapi.ContainerConfig) {
	n.T.Helper()
	n.AssertRefused(p, cfg, ociimage.ErrPartsMismatch.Error())
}

// assertRefused: a container of cfg is refused before anything is
// restored, for reason, naming the container and the remedy.
func (n *CRINode) AssertRefused(p *CRIPod, cfg *criapi.ContainerConfig, reason string) {
	n.T.Helper()
	if err := p.CreateWith(cfg); err != nil {
		n.T.Fatal(err)
	}
	err := p.Start()
	if err == nil {
		n.T.Fatalf("pod %s restored from a manifest whose parts its config does not name; ticks %v", p.Name, CtrdTicks(n.T, p.LogPath()))
	}
	WantIn(n.T, err.Error(), reason, "container app (", "cryo image build --runnable")
	n.T.Logf("refused: %v", err)
	if ticks := CtrdTicks(n.T, p.LogPath()); len(ticks) != 0 {
		n.T.Errorf("refused pod %s printed ticks %v", p.Name, ticks)
	}
	p.Remove()
}
