package ociimage

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/protobuf/proto"
	ptypes "github.com/containerd/containerd/v2/pkg/protobuf/types"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/ociimage/archive"
)

func TestCheckpointContainerID(t *testing.T) {
	for ref, want := range map[string]string{
		"containerd.io/checkpoint/app:11-22-2026-03:31": "app",
		"localhost/ckpt/app2:1":                         "app2",
		"app3":                                          "app3",
	} {
		if got := CheckpointContainerID(ref); got != want {
			t.Errorf("CheckpointContainerID(%q) = %q, want %q", ref, got, want)
		}
	}
}

// ociLayout writes blobs and an index.json naming top into dir.
type ociLayout struct {
	t   *testing.T
	dir string
}

func (l ociLayout) blob(mt string, data []byte) ocispec.Descriptor {
	d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(data), Size: int64(len(data))}
	p := filepath.Join(l.dir, "blobs/sha256", d.Digest.Encoded())
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return d
}

// TestOpenExportedContainerdCheckpoint: a `ctr image export` of a
// containerd checkpoint opens as a containerd source with the CRIU images,
// the spec, the uncompressed rw layer and the base image's name; a
// tampered blob is refused.
func TestOpenExportedContainerdCheckpoint(t *testing.T) {
	l := ociLayout{t, t.TempDir()}
	var criu bytes.Buffer
	ck := fakeCheckpoint(t)
	files, _ := listFiles(ck, "")
	if err := archive.Write(&criu, files); err != nil {
		t.Fatal(err)
	}
	specJSON, _ := json.Marshal(rspec.Spec{Version: "1.1.0", Process: &rspec.Process{Args: []string{"app"}}})
	anyData, _ := proto.Marshal(&ptypes.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Spec", Value: specJSON})
	var rw bytes.Buffer
	zw := gzip.NewWriter(&rw)
	zw.Write([]byte("layer tar"))
	zw.Close()
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		Annotations: map[string]string{"image.name": "docker.io/library/base:1"},
		Manifests: []ocispec.Descriptor{
			l.blob(images.MediaTypeContainerd1Checkpoint, criu.Bytes()),
			l.blob(images.MediaTypeContainerd1CheckpointConfig, anyData),
			l.blob(ocispec.MediaTypeImageLayerGzip, rw.Bytes()),
		}}
	idxData, _ := json.Marshal(idx)
	top := l.blob(ocispec.MediaTypeImageIndex, idxData)
	top.Annotations = map[string]string{"io.containerd.image.name": "containerd.io/checkpoint/web:01-02-2026-15:04"}
	topData, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, Manifests: []ocispec.Descriptor{top}})
	os.WriteFile(filepath.Join(l.dir, "index.json"), topData, 0o644)
	os.WriteFile(filepath.Join(l.dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)

	src, err := OpenSource(l.dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Kind != KindContainerd || src.Name != "web" || src.BaseImage != "docker.io/library/base:1" {
		t.Errorf("source: kind %s, name %q, base %q", src.Kind, src.Name, src.BaseImage)
	}
	got, _ := os.ReadFile(filepath.Join(src.Root, RootfsDiffName))
	if string(got) != "layer tar" {
		t.Errorf("rootfs-diff.tar = %q, want the uncompressed rw layer", got)
	}
	if got, _ := os.ReadFile(filepath.Join(src.Root, SpecDumpName)); !bytes.Equal(got, specJSON) {
		t.Errorf("spec.dump = %s", got)
	}
	if _, err := os.Stat(filepath.Join(src.CRIU, "pages-2.img")); err != nil {
		t.Error(err)
	}
	// The pages files were hashed as the CRIU tar was extracted, for the
	// build to store them without reading them again.
	for _, name := range []string{"pages-1.img", "pages-2.img"} {
		p := filepath.Join(src.CRIU, name)
		data, _ := os.ReadFile(p)
		if got := src.sums[p].digest; got != digest.FromBytes(data) || !src.sums[p].describes(p) {
			t.Errorf("%s: extraction's sum %s, want %s of the file", name, got, digest.FromBytes(data))
		}
	}

	// Tamper with the CRIU tar: refused.
	p := filepath.Join(l.dir, "blobs/sha256", idx.Manifests[0].Digest.Encoded())
	data, _ := os.ReadFile(p)
	data[len(data)/2] ^= 0xff
	os.WriteFile(p, data, 0o644)
	if _, err := OpenSource(l.dir, t.TempDir()); !errors.Is(err, ErrIntegrity) {
		t.Errorf("tampered CRIU tar: %v, want %v", err, ErrIntegrity)
	}
}
