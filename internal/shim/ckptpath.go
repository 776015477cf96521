package shim

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
)

// Where a restore's checkpoint directory comes from. containerd 2.x turns
// the runc option CriuImagePath (client.WithRestoreImagePath) into the
// request's checkpoint for any runtime: the shim restores from that
// directory in place, without a copy. containerd 1.7 does so only for
// runtimes named io.containerd.runc*, and otherwise starts the task fresh;
// the shim takes the option itself there. A checkpoint image of the
// content store instead reaches the shim as a directory that containerd
// unpacked the blob into and never removes; it holds the processes'
// memory, so the shim removes it once the restore has read it.

// criuImagePath is the runc option CriuImagePath of the request, or "".
func criuImagePath(r *taskv3.CreateTaskRequest) string {
	if r.Options == nil || !typeurl.Is(r.Options, &options.Options{}) {
		return ""
	}
	var opts options.Options
	if err := typeurl.UnmarshalTo(r.Options, &opts); err != nil {
		return ""
	}
	return opts.CriuImagePath
}

// restoreFromImagePath makes the request restore from the runc option
// CriuImagePath when containerd passed the option but no checkpoint.
func restoreFromImagePath(ctx context.Context, r *taskv3.CreateTaskRequest) {
	p := criuImagePath(r)
	if r.Checkpoint != "" || p == "" {
		return
	}
	log.G(ctx).WithFields(log.Fields{"id": r.ID, "checkpoint": p}).
		Info("cryo: restoring from the runc option CriuImagePath, which this containerd passes only to runc-named runtimes")
	r.Checkpoint = p
}

// containerdCopy is the request's checkpoint directory when containerd
// unpacked it from its content store for this Create (os.MkdirTemp in
// $XDG_RUNTIME_DIR or the temporary directory, named ctrd-checkpoint*),
// and "" when the directory is the caller's own.
func containerdCopy(r *taskv3.CreateTaskRequest) string {
	dir := filepath.Clean(r.Checkpoint)
	if r.Checkpoint == "" || dir == filepath.Clean(criuImagePath(r)) {
		return ""
	}
	tmp := filepath.Clean(cmp.Or(os.Getenv("XDG_RUNTIME_DIR"), os.TempDir()))
	if filepath.Dir(dir) != tmp || !strings.HasPrefix(filepath.Base(dir), "ctrd-checkpoint") {
		return ""
	}
	return dir
}

// removeContainerdCopy removes containerd's unpacked copy of a checkpoint.
func removeContainerdCopy(ctx context.Context, id, dir string) {
	if dir == "" {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		log.G(ctx).WithError(err).WithFields(log.Fields{"id": id, "dir": dir}).
			Warn("cryo: could not remove containerd's copy of the checkpoint, which holds the processes' memory; remove it by hand")
	}
}

// imageDirFromOptions makes the checkpoint go where the runc option
// ImagePath says (client.WithCheckpointImagePath). containerd 2.x passes
// that path as the request's own for any runtime; containerd 1.7 does so
// only for runtimes named io.containerd.runc*, and gives any other a
// temporary directory of its own, which it then packs into its content
// store: the caller's directory would stay empty. The shim takes the
// option itself there, as restoreFromImagePath does for the restore.
func imageDirFromOptions(ctx context.Context, r *taskv3.CheckpointTaskRequest, opts *options.CheckpointOptions) {
	if opts.ImagePath == "" || filepath.Clean(opts.ImagePath) == filepath.Clean(r.Path) {
		return
	}
	log.G(ctx).WithFields(log.Fields{"id": r.ID, "image-path": opts.ImagePath, "containerd-dir": r.Path}).
		Info("cryo: checkpointing into the runc option ImagePath, which this containerd honours only for runc-named runtimes")
	r.Path = opts.ImagePath
}
