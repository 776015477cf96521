package shim

import (
	"fmt"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"
)

// criuWorkInImage makes CRIU write its dump log and stats-dump into the
// image directory when the request names no work directory of its own.
// runc's task service would otherwise give CRIU a work directory in the
// bundle and delete it afterwards, and the checkpoint would carry neither
// file: containerd's CRI plugin passes a work path only to
// io.containerd.runc.v2, and ctr passes one only when asked. In the image
// directory both travel with the checkpoint (containerd tars the whole
// directory), checkpointctl can read the dump's statistics, and a later
// run can tell a completed dump from a partial one (manifest.DumpCompleted).
//
// It returns the work directory CRIU will use when that is not the image
// directory (the caller's --work-path), or "".
func criuWorkInImage(r *taskv3.CheckpointTaskRequest, opts *options.CheckpointOptions) (string, error) {
	if opts.WorkPath != "" && opts.WorkPath != r.Path {
		return opts.WorkPath, nil
	}
	opts.WorkPath = r.Path
	a, err := typeurl.MarshalAny(opts)
	if err != nil {
		return "", fmt.Errorf("set CRIU's work directory to the image directory %s: %w", r.Path, err)
	}
	r.Options = &anypb.Any{TypeUrl: a.GetTypeUrl(), Value: a.GetValue()}
	return "", nil
}
