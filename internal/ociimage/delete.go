package ociimage

import (
	"context"
	"fmt"
)

// DeleteRemote deletes the manifest ref names (a tag or a digest) from
// its registry, and with it every tag of that manifest: what the
// Kubernetes node agent does for a deleted Checkpoint. A registry that
// has deletes switched off answers 405, returned as the error.
func DeleteRemote(ctx context.Context, ref string, o RemoteOptions) error {
	repo, err := newRepository(ref, o)
	if err != nil {
		return err
	}
	d, err := repo.Resolve(ctx, repo.Reference.Reference)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", ref, err)
	}
	if err := repo.Delete(ctx, d); err != nil {
		return fmt.Errorf("delete %s: %w", ref, err)
	}
	return nil
}
