package k8s

import (
	"archive/tar"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// archiveManifest decodes cryo's GPU manifest from a checkpoint archive.
func archiveManifest(t testing.TB, path string) *manifest.Manifest {
	t.Helper()
	var m *manifest.Manifest
	harness.ReadArchive(t, path, func(hdr *tar.Header, r io.Reader) {
		if filepath.Base(hdr.Name) != manifest.ManifestName {
			return
		}
		m = new(manifest.Manifest)
		if err := json.NewDecoder(r).Decode(m); err != nil {
			t.Fatalf("%s: %s: %v", path, hdr.Name, err)
		}
	})
	if m == nil {
		t.Fatalf("%s holds no %s", path, manifest.ManifestName)
	}
	return m
}
