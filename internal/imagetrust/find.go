package imagetrust

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry"
)

// BundleType is the media type prefix of a Sigstore bundle, as an OCI
// artifact's type and as its layer's (cosign's BUNDLE_SPEC).
const BundleType = "application/vnd.dev.sigstore.bundle"

// The registry is not trusted: bound what is read from it.
const (
	maxReferrers    = 64
	maxManifestSize = 64 << 10
	maxBundleSize   = 1 << 20
)

// Registry is what finding signatures needs of a repository (oras's
// remote.Repository): its referrers, by API or by the referrers tag.
type Registry interface {
	registry.ReferrerLister
	content.Fetcher
}

// candidate is one bundle found for the digest, or why it was unreadable.
type candidate struct {
	manifest ocispec.Descriptor
	bundle   *bundle.Bundle
	err      error
}

// findBundles lists the Sigstore bundles attached to subject. An artifact
// is taken as a bundle by its manifest, not by the listing's artifactType
// alone: some cosign releases list bundles with the empty type.
func findBundles(ctx context.Context, repo Registry, subject ocispec.Descriptor) ([]candidate, error) {
	var refs []ocispec.Descriptor
	err := repo.Referrers(ctx, subject, "", func(page []ocispec.Descriptor) error {
		for _, d := range page {
			if maybeBundle(d) && len(refs) < maxReferrers {
				refs = append(refs, d)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the signatures of %s (referrers): %w", subject.Digest, err)
	}
	var out []candidate
	for _, d := range refs {
		b, err := readBundle(ctx, repo, d, subject)
		if !errors.Is(err, errNotBundle) {
			out = append(out, candidate{manifest: d, bundle: b, err: err})
		}
	}
	return out, nil
}

func maybeBundle(d ocispec.Descriptor) bool {
	return d.ArtifactType == "" || d.ArtifactType == ocispec.MediaTypeEmptyJSON || strings.HasPrefix(d.ArtifactType, BundleType)
}

var errNotBundle = errors.New("not a Sigstore bundle")

// readBundle fetches the bundle that the artifact manifest d holds.
func readBundle(ctx context.Context, repo Registry, d, subject ocispec.Descriptor) (*bundle.Bundle, error) {
	if d.MediaType != ocispec.MediaTypeImageManifest || d.Size > maxManifestSize {
		return nil, errNotBundle
	}
	data, err := content.FetchAll(ctx, repo, d)
	if err != nil {
		return nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, errNotBundle
	}
	layer, ok := bundleLayer(m)
	if !ok {
		return nil, errNotBundle
	}
	if m.Subject == nil || m.Subject.Digest != subject.Digest {
		return nil, fmt.Errorf("its subject is not %s", subject.Digest)
	}
	if layer.Size > maxBundleSize {
		return nil, fmt.Errorf("its bundle is %d bytes (at most %d)", layer.Size, maxBundleSize)
	}
	raw, err := content.FetchAll(ctx, repo, layer)
	if err != nil {
		return nil, err
	}
	var b bundle.Bundle
	if err := b.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("unreadable bundle: %w", err)
	}
	return &b, nil
}

// bundleLayer is the one bundle layer of an artifact manifest.
func bundleLayer(m ocispec.Manifest) (ocispec.Descriptor, bool) {
	if len(m.Layers) != 1 || !strings.HasPrefix(m.Layers[0].MediaType, BundleType) {
		return ocispec.Descriptor{}, false
	}
	return m.Layers[0], true
}
