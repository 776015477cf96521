package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	introspectionapi "github.com/containerd/containerd/api/services/introspection/v1"
	"github.com/containerd/log"
)

// criuStatsFiles are the files of CRIU's work directory that containerd's
// CRI plugin copies into a checkpoint archive, from the container's
// directory under its root: from 2.2 on it fails CheckpointContainer when
// stats-dump is missing ("open …/stats-dump: no such file or directory").
// It finds them there only for io.containerd.runc.v2, the one runtime it
// gives that directory as the work path, so cryo puts them there itself.
var criuStatsFiles = []string{"stats-dump", "dump.log"}

// criContainersDir is where containerd's CRI plugin keeps its containers'
// directories, under containerd's root (io.containerd.grpc.v1.cri since
// containerd 1.0, kept so by 2.x).
const criContainersDir = "io.containerd.grpc.v1.cri/containers"

// copyStatsForCRI copies CRIU's stats-dump and dump.log from dir into the
// CRI plugin's directory of container id, if the container is a CRI one
// (the directory exists). A failure is logged, not returned: the
// checkpoint itself is complete; only containerd's archive would lack
// them, or, from containerd 2.2 on, CheckpointContainer fail.
func (s *service) copyStatsForCRI(ctx context.Context, id, dir string) {
	root, err := s.daemon.root(ctx)
	if err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: containerd's root is unknown, so a CRI checkpoint archive lacks CRIU's stats-dump and dump.log (containerd 2.2+ then fails CheckpointContainer)")
		return
	}
	dst := filepath.Join(root, criContainersDir, id)
	if _, err := os.Stat(dst); err != nil {
		return // not a CRI container
	}
	for _, name := range criuStatsFiles {
		if err := copyPrivate(filepath.Join(dir, name), filepath.Join(dst, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.G(ctx).WithError(err).WithFields(log.Fields{"id": id, "file": name}).Warn("cryo: could not give containerd's CRI plugin CRIU's file for its checkpoint archive")
		}
	}
}

// copyPrivate copies a file owner-only: it holds details of the process.
func copyPrivate(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}

// root is containerd's root directory, from the path that its metadata
// plugin exports (ROOT/io.containerd.metadata.v1.bolt/meta.db): the shim is
// not told the root otherwise.
func (l *legacyDaemon) root(ctx context.Context) (string, error) {
	if _, err := l.isLegacy(ctx); err != nil && l.conn == nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	resp, err := introspectionapi.NewIntrospectionClient(l.conn).Plugins(ctx, &introspectionapi.PluginsRequest{
		Filters: []string{"type==io.containerd.metadata.v1"},
	})
	if err != nil {
		return "", fmt.Errorf("ask containerd for its plugins: %w", err)
	}
	for _, p := range resp.Plugins {
		if path := p.Exports["path"]; path != "" {
			return filepath.Dir(filepath.Dir(path)), nil
		}
	}
	return "", fmt.Errorf("containerd's metadata plugin exports no path")
}
