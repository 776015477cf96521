package shim

import (
	"context"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cryo-gpu/cryo/internal/bundle"
)

// pause is the GPU-free pause: CUDA suspended (its GPU memory freed), then
// the runc service's Pause freezes the task. A task that is not running
// (paused already, stopped), or whose annotation or configuration asks for
// a freeze-only pause, goes to the runc service as it is.
func (s *service) pause(ctx context.Context, r *taskv3.PauseRequest) (*emptypb.Empty, error) {
	st, err := s.TTRPCTaskService.State(ctx, &taskv3.StateRequest{ID: r.ID})
	o := s.orch(ctx)
	if err != nil || st.Status != task.Status_RUNNING || !o.GPUFreePause(bundle.Annotations(st.Bundle)) {
		return s.TTRPCTaskService.Pause(ctx, r)
	}
	freeze := func(ctx context.Context) error {
		_, err := s.TTRPCTaskService.Pause(ctx, r)
		return err
	}
	t := s.target(r.ID, false)
	if t.PreCheckpoint, t.Wake, err = s.hooksOf(r.ID, st.Bundle, "pause"); err != nil {
		return nil, toGRPC(err, false)
	}
	if err := o.Pause(ctx, t, freeze); err != nil {
		return nil, toGRPC(err, false)
	}
	return &emptypb.Empty{}, nil
}

// Resume thaws the task, then resumes the CUDA processes a GPU-free pause
// suspended (none after a freeze-only pause). containerd resumes every
// task after its checkpoint; with --exit the task is gone by then and the
// runc service's error is returned, as runc's would be.
//
// A stopping shim refuses it: the resume that containerd sends after a
// checkpoint the shim finished on its way out would otherwise race the
// shim library's close of the runc service's events.
func (s *service) Resume(ctx context.Context, r *taskv3.ResumeRequest) (*emptypb.Empty, error) {
	if err := s.stoppingErr(r.ID, "resume"); err != nil {
		return nil, toGRPC(err, false)
	}
	var thawErr error
	thaw := func(ctx context.Context) error {
		_, thawErr = s.TTRPCTaskService.Resume(ctx, r)
		return thawErr
	}
	t := s.target(r.ID, false)
	if st, err := s.TTRPCTaskService.State(ctx, &taskv3.StateRequest{ID: r.ID}); err == nil {
		// A bad annotation refused the pause already: none to wake here.
		t.PreCheckpoint, t.Wake, _ = s.hooksOf(r.ID, st.Bundle, "resume")
	}
	if err := s.orch(ctx).Resume(ctx, t, thaw); err != nil {
		if thawErr != nil {
			return nil, thawErr // the runc service's error, with its code
		}
		return nil, toGRPC(err, false)
	}
	return &emptypb.Empty{}, nil
}
