package ociimage

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

// podmanImage stores an image laid out as `podman container checkpoint
// --create-image` makes it: one gzip layer holding the export, Podman's
// annotations only. With man, checkpoint/ holds cryo's manifest too.
func podmanImage(t *testing.T, st *Store, ref string, man *manifest.Manifest) {
	t.Helper()
	ctx := context.Background()
	root := exportDir(t, "cryo-runc", false)
	os.WriteFile(filepath.Join(root, checkpointDir, "pages-1.img"), bytes.Repeat([]byte{1}, 4096), 0o600)
	if man != nil {
		data, _ := json.Marshal(man)
		os.WriteFile(filepath.Join(root, checkpointDir, manifest.ManifestName), data, 0o600)
	}
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	var plain, packed bytes.Buffer
	if err := archive.Write(&plain, files); err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(&packed)
	zw.Write(plain.Bytes())
	zw.Close()
	layer := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(packed.Bytes()), Size: int64(packed.Len())}
	if err := st.oci.Push(ctx, layer, bytes.NewReader(packed.Bytes())); err != nil {
		t.Fatal(err)
	}
	created := time.Now().UTC()
	cfg, err := st.pushJSON(ctx, ocispec.MediaTypeImageConfig, ocispec.Image{Created: &created,
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.FromBytes(plain.Bytes())}}})
	if err != nil {
		t.Fatal(err)
	}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: []ocispec.Descriptor{layer},
		Annotations: map[string]string{AnnPodmanName: "app", AnnPodmanRuntime: "cryo-runc", AnnPodmanRawImageName: "alpine"}}
	d, err := st.pushJSON(ctx, ocispec.MediaTypeImageManifest, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.oci.Tag(ctx, d, ref); err != nil {
		t.Fatal(err)
	}
}

func testStore(t *testing.T) *Store {
	st, err := OpenStore(context.Background(), filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Podman's checkpoint image is a podman checkpoint. Its GPU needs come from
// cryo's manifest in its layer when the image is local; they are unknown,
// never "none", when the manifest is not there or not read.
func TestInspectPodmanImage(t *testing.T) {
	ctx := context.Background()
	st := testStore(t)
	need := manifest.GPUNeed{Name: "NVIDIA H100", ComputeCapability: "9.0", Memory: 1 << 30}
	podmanImage(t, st, "example/podman:gpu", &manifest.Manifest{Version: 3, Created: time.Now(), Needs: []manifest.GPUNeed{need}})
	podmanImage(t, st, "example/podman:plain", nil)

	sum, err := st.InspectLocalWith(ctx, "example/podman:gpu", InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Kind != KindPodman || len(sum.GPUs) != 1 || sum.GPUs[0].Name != need.Name || sum.GPUsUnknown != "" || sum.Name != "app" {
		t.Fatalf("local Podman image with cryo's manifest: %+v", sum)
	}
	sum, err = st.InspectLocalWith(ctx, "example/podman:plain", InspectOptions{})
	if err != nil || sum.GPUsUnknown != GPUsNoManifest || sum.Created.IsZero() {
		t.Fatalf("local Podman image without cryo's manifest: %+v %v", sum, err)
	}
	im, err := st.LoadImage(ctx, "example/podman:gpu")
	if err != nil {
		t.Fatal(err)
	}
	if im.Kind() != KindPodman {
		t.Fatalf("kind %q", im.Kind())
	}
	// What InspectRemote sees: the manifest alone.
	if sum := FromManifest(im.Manifest); sum.GPUsUnknown != GPUsPullToRead || sum.Kind != KindPodman {
		t.Fatalf("manifest only: %+v", sum)
	}
}

// `image ls` reads manifests only: a cryo image's sizes and GPUs, a Podman
// image's GPUs unknown.
func TestListImages(t *testing.T) {
	st, dir, _ := build(t, nil)
	podmanImage(t, st, "example/podman:1", nil)
	list, err := st.ListImages(context.Background())
	if err != nil || len(list) != 2 {
		t.Fatalf("list %+v %v", list, err)
	}
	cryo, pod := list[0], list[1]
	if cryo.Ref != "example/ckpt:1" || cryo.Kind != KindProcess || cryo.RawSize != 3<<20+9+manifestBytes(t, dir) || cryo.Size <= 0 || cryo.Size >= cryo.RawSize || cryo.GPUs() != "none" || cryo.Created.IsZero() || cryo.Digest == "" {
		t.Fatalf("cryo image %+v", cryo)
	}
	if pod.Kind != KindPodman || pod.GPUs() != "unknown" || pod.RawSize != 0 || pod.Created.IsZero() {
		t.Fatalf("Podman image %+v", pod)
	}
	if _, err := json.Marshal(list); err != nil {
		t.Fatal(err)
	}
}

// A Podman checkpoint image exports as the export it holds.
func TestExportPodmanImage(t *testing.T) {
	st := testStore(t)
	podmanImage(t, st, "example/podman:1", nil)
	var buf bytes.Buffer
	if err := st.Export(context.Background(), "example/podman:1", &buf, nil); err != nil {
		t.Fatal(err)
	}
	files := tarEntries(t, buf.Bytes())
	if len(files["checkpoint/pages-1.img"]) != 4096 || string(files[configDumpName]) != `{"id":"c1","name":"app","runtime":"cryo-runc"}` {
		t.Fatalf("export: %d entries, config.dump %s", len(files), files[configDumpName])
	}
}
