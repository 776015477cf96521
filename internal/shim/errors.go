package shim

import (
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/grpc/status"
)

// toGRPC converts an error once, at the API edge: cryo's sentinels carry
// their containerd class where they are defined (report.Sentinel), so that
// containerd, the kubelet and `ctr` see what kind of failure it is (a busy
// target can be retried, a host that lacks the GPUs cannot) instead of
// Unknown; the rest become FailedPrecondition for restore checks and
// Unknown otherwise, with the message intact. errgrpc reads the class the
// way errdefs.Resolve does: the outermost in the chain wins.
func toGRPC(err error, precondition bool) error {
	if err == nil {
		return nil
	}
	if precondition && errdefs.Resolve(err) == errdefs.ErrUnknown {
		err = fmt.Errorf("%w: %w", errdefs.ErrFailedPrecondition, err)
	}
	return messageOnly(errgrpc.ToGRPC(err))
}

// messageOnly drops the status details errgrpc attaches for each error of
// a multi-error chain (a manifest.HostError wraps ErrIncompatibleHost and
// the matcher's ErrNoMatchingGPU): containerd's client joins them to the
// message, which then ended with "host cannot restore this checkpoint" and
// "no matching GPU" again after cryo's full report. The code keeps the
// class; the message is the whole report, once.
func messageOnly(err error) error {
	s, ok := status.FromError(err)
	if !ok || len(s.Details()) == 0 {
		return err
	}
	return status.New(s.Code(), s.Message()).Err()
}
