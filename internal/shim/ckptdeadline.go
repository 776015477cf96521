package shim

import (
	"context"
	"os"
	"path/filepath"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// containerd's own restore (a client's WithTaskCheckpoint, or its CRI
// restore) unpacks the checkpoint from its content store into a directory
// of its own (containerdCopy) before it calls the shim's Create, within the
// same call the kubelet gives up on. The restore's one deadline counts
// from the start of that unpack, so that it bounds the unpack, the checks,
// CRIU and the CUDA resume together, as it does for the shim's own image
// restores.

// unpackBegan is when containerd began to unpack r's checkpoint: the
// earliest birth or change time of its directory and the files in it
// (each written once, as the unpack reached it), else now. The files'
// modification times are the tar's and say nothing.
func unpackBegan(r *taskv3.CreateTaskRequest, now time.Time) time.Time {
	dir := containerdCopy(r)
	if dir == "" {
		return now
	}
	began := earliest(now, dir)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		began = earliest(began, filepath.Join(dir, e.Name()))
	}
	return began
}

// earliest is the earlier of t and path's birth (where the file system
// records it) or change time.
func earliest(t time.Time, path string) time.Time {
	var st unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME|unix.STATX_CTIME, &st) != nil {
		return t
	}
	for _, ts := range []unix.StatxTimestamp{st.Btime, st.Ctime} {
		if ts.Sec == 0 {
			continue
		}
		if at := time.Unix(ts.Sec, int64(ts.Nsec)); at.Before(t) {
			t = at
		}
	}
	return t
}

// withCheckpointDeadline bounds ctx by the restore's deadline of r, which
// counts from containerd's unpack, and refuses the restore when that
// unpack alone used it up.
func (s *service) withCheckpointDeadline(ctx context.Context, r *taskv3.CreateTaskRequest) (context.Context, context.CancelFunc, error) {
	now := time.Now()
	ctx, cancel := s.withRestoreDeadline(ctx, r.Bundle, unpackBegan(r, now))
	d, ok := orchestrate.RestoreDeadline(ctx)
	if !ok || now.Before(d.At()) {
		return ctx, cancel, nil
	}
	return ctx, cancel, &report.StepError{Op: "restore", ID: r.ID, Step: "unpack", Outcome: "nothing was restored", Remedy: orchestrate.RestoreDeadlineRemedy,
		Err: orchestrate.DeadlineExceededIn("unpack of the checkpoint by containerd (it took "+now.Sub(d.Since).Round(time.Millisecond).String()+")", d.Limit, nil)}
}
