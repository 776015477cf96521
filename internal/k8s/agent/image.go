package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/ociimage"
	"github.com/cryo-gpu/cryo/internal/progress"
)

// work is one Checkpoint's private directory on the node: the archive's
// extraction, a local image store that exists only until the push, and
// the registry credentials. It is removed whatever the outcome, so a node
// keeps nothing of a checkpoint but the kubelet's archive, which the
// agent deletes as well.
type work struct {
	dir string
}

// workDir is the directory of the Checkpoint with this UID under root.
func workDir(root, uid string) work { return work{dir: filepath.Join(root, uid)} }

func (w work) create() error {
	if err := os.MkdirAll(filepath.Dir(w.dir), 0o700); err != nil {
		return err
	}
	return os.Mkdir(w.dir, 0o700)
}

func (w work) remove() error { return os.RemoveAll(w.dir) }
func (w work) store() string { return filepath.Join(w.dir, "store") }
func (w work) tmp() string   { return filepath.Join(w.dir, "tmp") }
func (w work) auth() string  { return filepath.Join(w.dir, "auth.json") }

// writeAuth stores the push Secret's docker config JSON, readable by the
// agent alone, for the image library's credential store.
func (w work) writeAuth(dockerConfig []byte) error {
	return os.WriteFile(w.auth(), dockerConfig, 0o600)
}

// built is the runnable image of one archive, in the work's store.
type built struct {
	ref     string
	summary *ociimage.Summary
	steps   []manifest.Step // the shim's own steps, from cryo's manifest
}

// buildRunnable turns the kubelet's archive into a runnable checkpoint
// image tagged ref: the same code as `cryo image build --runnable`. The
// application's base image is pulled with the push Secret's credentials.
func (w work) buildRunnable(ctx context.Context, archive, ref string, bytes *progress.Renderer) (*built, error) {
	if err := os.MkdirAll(w.tmp(), 0o700); err != nil {
		return nil, err
	}
	st, err := ociimage.OpenStore(ctx, w.store())
	if err != nil {
		return nil, err
	}
	src, err := ociimage.OpenSource(archive, w.tmp())
	if err != nil {
		return nil, err
	}
	defer src.Close()
	_, sum, err := ociimage.Build(ctx, st, src, ociimage.BuildOptions{Ref: ref, SplitAt: ociimage.DefaultSplitAt,
		Runnable: true, Remote: w.remote(), Progress: bytes})
	if err != nil {
		return nil, err
	}
	b := &built{ref: ref, summary: sum}
	if src.Manifest != nil {
		b.steps = src.Manifest.Steps
	}
	return b, nil
}

// push sends the image to its registry and returns its manifest digest.
func (w work) push(ctx context.Context, b *built, bytes *progress.Renderer) (string, error) {
	st, err := ociimage.OpenStore(ctx, w.store())
	if err != nil {
		return "", err
	}
	d, err := st.Push(ctx, b.ref, ociimage.TransferOptions{RemoteOptions: w.remote(), Renderer: bytes})
	if err != nil {
		return "", err
	}
	return d.Digest.String(), nil
}

// remote is the registry access of a Checkpoint: its Secret's credentials
// only, never the node's.
func (w work) remote() ociimage.RemoteOptions {
	if _, err := os.Stat(w.auth()); err != nil {
		return ociimage.RemoteOptions{}
	}
	return ociimage.RemoteOptions{AuthFiles: []string{w.auth()}}
}

// pinned is repository@digest, the form a pod names a checkpoint by.
func pinned(repository, digest string) string { return fmt.Sprintf("%s@%s", repository, digest) }

// deleteRemote deletes a pushed image with the Secret's credentials.
func (w work) deleteRemote(ctx context.Context, ref string) error {
	return ociimage.DeleteRemote(ctx, ref, w.remote())
}
