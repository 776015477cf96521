package gpu

import (
	"path/filepath"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// storedDigest is the digest of ref in an image store.
func storedDigest(t *testing.T, store, ref string) string {
	t.Helper()
	var index ocispec.Index
	harness.ReadJSON(t, filepath.Join(store, "index.json"), &index)
	for _, d := range index.Manifests {
		if d.Annotations[ocispec.AnnotationRefName] == ref {
			return d.Digest.String()
		}
	}
	t.Fatalf("%s is not in the store %s", ref, store)
	return ""
}
