package ociimage

import (
	"context"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
)

// Verifier judges an image before Pull moves any layer
// (imagetrust.Verifier: signatures under the node's policy). It gets the
// manifest the reference resolved to, which is then what is copied, by
// its digest, so that a tag moved after the check cannot swap the image.
type Verifier interface {
	VerifyPull(ctx context.Context, ref string, manifest ocispec.Descriptor, repo *remote.Repository) error
}

// OpenRepository opens ref's repository as Pull does (retries,
// credentials, plain HTTP for loopback unless told otherwise).
func OpenRepository(ref string, o RemoteOptions) (*remote.Repository, error) {
	return newRepository(ref, o)
}
