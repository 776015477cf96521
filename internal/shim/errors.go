package shim

import (
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/grpc/status"

	"github.com/cryo-gpu/cryo/internal/report"
)

// classify wraps err with its containerd class, unless it has one: the
// class its first cryo sentinel carries where it is defined
// (report.Sentinel), so that containerd, the kubelet and `ctr` see what
// kind of failure it is (a busy target can be retried, a host that lacks
// the GPUs cannot) instead of Unknown. A class already in the chain
// (containerd's own errors) wins.
func classify(err error) error {
	if errdefs.Resolve(err) != errdefs.ErrUnknown {
		return err
	}
	if c := report.ClassIn(err); c != nil {
		return fmt.Errorf("%w: %w", c, err)
	}
	return err
}

// toGRPC converts an error once, at the API edge: cryo's sentinels get
// their containerd class (classify); the rest become FailedPrecondition
// for restore checks and Unknown otherwise, with the message intact.
func toGRPC(err error, precondition bool) error {
	if err == nil {
		return nil
	}
	err = classify(err)
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
