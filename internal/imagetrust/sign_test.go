package imagetrust

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"oras.land/oras-go/v2/errdef"

	"github.com/cryo-gpu/cryo/internal/imagetrust/signtest"
)

// signer is a cosign-style key pair made with sigstore-go's signing side.
type signer struct {
	kp  *sign.EphemeralKeypair
	pub string // its public key file
}

func newSigner(t *testing.T) *signer {
	t.Helper()
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := kp.GetPublicKeyPem()
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(t.TempDir(), "cosign.pub")
	if err := os.WriteFile(pub, []byte(pem), 0o600); err != nil {
		t.Fatal(err)
	}
	return &signer{kp: kp, pub: pub}
}

// bundle signs what `cosign sign` signs for d: an in-toto statement of
// predicate type predicate whose subject is d, in a DSSE envelope.
func (s *signer) bundle(t *testing.T, d digest.Digest, predicate string) []byte {
	t.Helper()
	return signtest.Bundle(t, s.kp, "ckpt", d, predicate)
}

// fakeRegistry serves blobs and referrers from memory, as a registry
// would after `cosign sign` (or an attacker) attached artifacts.
type fakeRegistry struct {
	blobs     map[digest.Digest][]byte
	referrers map[digest.Digest][]ocispec.Descriptor
}

func newFakeRegistry() *fakeRegistry {
	return &fakeRegistry{blobs: map[digest.Digest][]byte{}, referrers: map[digest.Digest][]ocispec.Descriptor{}}
}

func (r *fakeRegistry) put(mt string, data []byte) ocispec.Descriptor {
	d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(data), Size: int64(len(data))}
	r.blobs[d.Digest] = data
	return d
}

// attach stores bundle as an artifact whose subject is subject.
func (r *fakeRegistry) attach(subject ocispec.Descriptor, bundle []byte) {
	layer := r.put(BundleType+".v0.3+json", bundle)
	cfg := r.put(ocispec.MediaTypeEmptyJSON, []byte("{}"))
	m, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		ArtifactType: BundleType + ".v0.3+json", Config: cfg, Layers: []ocispec.Descriptor{layer}, Subject: &subject})
	d := r.put(ocispec.MediaTypeImageManifest, m)
	d.ArtifactType = BundleType + ".v0.3+json"
	r.referrers[subject.Digest] = append(r.referrers[subject.Digest], d)
}

func (r *fakeRegistry) Fetch(_ context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
	b, ok := r.blobs[d.Digest]
	if !ok {
		return nil, errdef.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (r *fakeRegistry) Referrers(_ context.Context, d ocispec.Descriptor, _ string, fn func([]ocispec.Descriptor) error) error {
	return fn(r.referrers[d.Digest])
}

// image is a manifest stored in r.
func (r *fakeRegistry) image(content string) ocispec.Descriptor {
	return r.put(ocispec.MediaTypeImageManifest, []byte(content))
}
