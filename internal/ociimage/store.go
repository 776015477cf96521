package ociimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Store is the local image store: an OCI image layout directory, readable by
// the owner only, since its blobs hold process memory.
type Store struct {
	Root string
	// Records are the verification records an unpack checks and writes
	// (the entry point's CRYO_STAMP_DIR and CRYO_VERIFY).
	Records filedigest.Records
	oci     *oci.Store
}

// OpenStore opens (creating) the store at root.
func OpenStore(ctx context.Context, root string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(root, "blobs", "sha256"), 0o700); err != nil {
		return nil, fmt.Errorf("open image store %s: %w", root, err)
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, fmt.Errorf("open image store %s: %w", root, err)
	}
	// An interrupted pull leaves partial blobs in ingest/: they were never
	// renamed into blobs/, so they are garbage and the next pull restarts them.
	os.RemoveAll(filepath.Join(root, "ingest"))
	// A build killed while it encrypted a layer leaves its temporary blob.
	sweepEncTemps(filepath.Join(root, "blobs", "sha256"))
	s, err := oci.NewWithContext(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("open image store %s: %w", root, err)
	}
	return &Store{Root: root, oci: s}, nil
}

// blobPath is where the layout keeps a blob.
func (s *Store) blobPath(d ocispec.Descriptor) string {
	return filepath.Join(s.Root, "blobs", d.Digest.Algorithm().String(), d.Digest.Encoded())
}

// Resolve finds ref in the store.
func (s *Store) Resolve(ctx context.Context, ref string) (ocispec.Descriptor, error) {
	d, err := s.oci.Resolve(ctx, ref)
	if errors.Is(err, errdef.ErrNotFound) {
		return d, report.WithRemedy(fmt.Errorf("%s is not in the image store %s: %w", ref, s.Root, ErrNotFound), fmt.Sprintf("`cryo image pull %s` or `cryo image build`", ref))
	}
	return d, err
}

// Remove untags ref and deletes the blobs no other tag uses.
func (s *Store) Remove(ctx context.Context, ref string) error {
	d, err := s.Resolve(ctx, ref)
	if err != nil {
		return err
	}
	if err := s.oci.Untag(ctx, ref); err != nil {
		return fmt.Errorf("remove %s: %w", ref, err)
	}
	// Untag keeps the manifest in index.json under its digest, which keeps
	// it and its blobs reachable: delete it unless another tag names it.
	shared, err := s.tagged(ctx, d)
	if err != nil {
		return fmt.Errorf("remove %s: %w", ref, err)
	}
	if !shared {
		if err := s.oci.Delete(ctx, d); err != nil {
			return fmt.Errorf("remove %s: delete its manifest: %w", ref, err)
		}
	}
	if err := s.oci.GC(ctx); err != nil {
		return fmt.Errorf("remove %s: collect unused blobs: %w", ref, err)
	}
	return nil
}

// List returns the tags of the store.
func (s *Store) List(ctx context.Context) ([]string, error) {
	var out []string
	err := s.oci.Tags(ctx, "", func(tags []string) error {
		out = append(out, tags...)
		return nil
	})
	return out, err
}

// tagged reports whether some tag of the store still names d.
func (s *Store) tagged(ctx context.Context, d ocispec.Descriptor) (bool, error) {
	tags, err := s.List(ctx)
	if err != nil {
		return false, err
	}
	for _, t := range tags {
		if t == d.Digest.String() {
			continue
		}
		o, err := s.oci.Resolve(ctx, t)
		if err != nil {
			return false, err
		}
		if o.Digest == d.Digest {
			return true, nil
		}
	}
	return false, nil
}
