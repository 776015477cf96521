package ociimage

import (
	"encoding/json"
	"errors"
	"maps"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func testPart(content string) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: MediaTypeCheckpointPart, Digest: digest.FromString(content), Size: int64(len(content)),
		Annotations: map[string]string{AnnLayerPart: PartPages, AnnPartDiffID: digest.FromString("plain " + content).String()}}
}

// testRunnable is a runnable manifest and its bound config over the same
// application layer and changes' layer, with parts of its own.
func testRunnable(parts ...string) (ocispec.Image, ocispec.Manifest) {
	base := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromString("app"), Size: 3}
	rootfs := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromString("changes"), Size: 7,
		Annotations: map[string]string{AnnLayerPart: PartRootfsLayer}}
	layers := []ocispec.Descriptor{base, rootfs}
	for _, p := range parts {
		layers = append(layers, testPart(p))
	}
	ann := map[string]string{AnnLayout: LayoutRunnable, AnnKind: string(KindKubelet), AnnSizeTotal: "1000"}
	cfg := ocispec.Image{Config: ocispec.ImageConfig{Labels: map[string]string{"app": "label"}}}
	cfg.RootFS.DiffIDs = []digest.Digest{digest.FromString("app-plain"), digest.FromString("changes-plain")}
	return bindParts(cfg, layers, ann), ocispec.Manifest{Layers: layers, Annotations: ann}
}

func configID(t *testing.T, cfg ocispec.Image) digest.Digest {
	t.Helper()
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return digest.FromBytes(data)
}

// Two checkpoints of one application image get two configs, hence two
// image IDs, and each manifest passes against its own config only.
func TestBindPartsImageID(t *testing.T) {
	cfgV, manV := testRunnable("victim base", "victim pages")
	cfgA, manA := testRunnable("attacker base", "attacker pages")
	if configID(t, cfgV) == configID(t, cfgA) {
		t.Fatal("two checkpoints share one config digest")
	}
	if cfgV.Config.Labels["app"] != "label" {
		t.Errorf("the application's labels were lost: %v", cfgV.Config.Labels)
	}
	for _, legacy := range []bool{false, true} {
		if err := VerifyParts(cfgV, manV, legacy); err != nil {
			t.Errorf("victim's own manifest (legacy %v): %v", legacy, err)
		}
		if err := VerifyParts(cfgV, manA, legacy); !errors.Is(err, ErrPartsMismatch) {
			t.Errorf("attacker's parts under the victim's config (legacy %v): %v, want ErrPartsMismatch", legacy, err)
		}
	}
}

// Any change to what the restore reads from the manifest is refused.
func TestVerifyPartsRefusesChanges(t *testing.T) {
	cfg, man := testRunnable("base", "pages")
	edits := map[string]func(m *ocispec.Manifest){
		"extra part":     func(m *ocispec.Manifest) { m.Layers = append(m.Layers, testPart("more")) },
		"missing part":   func(m *ocispec.Manifest) { m.Layers = m.Layers[:len(m.Layers)-1] },
		"other digest":   func(m *ocispec.Manifest) { m.Layers[3].Digest = digest.FromString("other") },
		"other size":     func(m *ocispec.Manifest) { m.Layers[3].Size++ },
		"other diff-id":  func(m *ocispec.Manifest) { m.Layers[2].Annotations[AnnPartDiffID] = digest.FromString("x").String() },
		"reordered":      func(m *ocispec.Manifest) { m.Layers[2], m.Layers[3] = m.Layers[3], m.Layers[2] },
		"media type":     func(m *ocispec.Manifest) { m.Layers[1].MediaType = MediaTypeCheckpointPart },
		"kind":           func(m *ocispec.Manifest) { m.Annotations[AnnKind] = string(KindPodman) },
		"size budget":    func(m *ocispec.Manifest) { m.Annotations[AnnSizeTotal] = "1000000000000" },
		"new annotation": func(m *ocispec.Manifest) { m.Annotations[AnnProcesses] = "1:sh" },
	}
	for name, edit := range edits {
		m := man
		m.Layers = cloneDescs(man.Layers)
		m.Annotations = maps.Clone(man.Annotations)
		edit(&m)
		if err := VerifyParts(cfg, m, true); !errors.Is(err, ErrPartsMismatch) {
			t.Errorf("%s: %v, want ErrPartsMismatch", name, err)
		}
	}
	if err := VerifyParts(cfg, man, false); err != nil {
		t.Errorf("the edits reached the original manifest: %v", err)
	}
}

// An image built before the label: refused where a runtime chose the
// manifest, read where the CLI names it.
func TestVerifyPartsLegacy(t *testing.T) {
	cfg, man := testRunnable("base", "pages")
	delete(cfg.Config.Labels, LabelParts)
	if err := VerifyParts(cfg, man, false); !errors.Is(err, ErrPartsUnbound) {
		t.Errorf("no label, runtime path: %v, want ErrPartsUnbound", err)
	}
	if err := VerifyParts(cfg, man, true); err != nil {
		t.Errorf("no label, CLI path: %v", err)
	}
}

func cloneDescs(in []ocispec.Descriptor) []ocispec.Descriptor {
	out := make([]ocispec.Descriptor, len(in))
	for i, d := range in {
		d.Annotations = maps.Clone(d.Annotations)
		out[i] = d
	}
	return out
}
