package shim

import (
	"context"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// target describes a task to the orchestration: its pids come from the runc
// service (the container's cgroup), and thawing is the runc service's
// Resume, so that its state machine follows (paused → running).
func (s *service) target(id string, frozen bool) orchestrate.Target {
	t := orchestrate.Target{ID: id, PIDs: s.pids(id), DumpFreezes: true}
	if frozen {
		t.Thaw = func(ctx context.Context) error {
			_, err := s.TTRPCTaskService.Resume(ctx, &taskv3.ResumeRequest{ID: id})
			if err != nil && s.running(ctx, id) {
				// Someone resumed it first: a ctr whose own checkpoint
				// lost the lock to this one resumes the task it paused.
				// Running is all the thaw wants.
				return nil
			}
			return err
		}
	}
	return t
}

// running reports whether the task runs (not paused, not stopped).
func (s *service) running(ctx context.Context, id string) bool {
	st, err := s.TTRPCTaskService.State(ctx, &taskv3.StateRequest{ID: id})
	return err == nil && st.Status == task.Status_RUNNING
}

// restoredTarget is target for a task that runc has just restored, whose
// init is pid: see orchestrate.WithTree for why the cgroup is not enough.
func (s *service) restoredTarget(id string, pid int) orchestrate.Target {
	t := s.target(id, false)
	pids := t.PIDs
	t.PIDs = func(ctx context.Context) ([]int, error) {
		found, err := pids(ctx)
		return orchestrate.WithTree(found, pid), err
	}
	return t
}

func (s *service) pids(id string) func(context.Context) ([]int, error) {
	return func(ctx context.Context) ([]int, error) {
		resp, err := s.TTRPCTaskService.Pids(ctx, &taskv3.PidsRequest{ID: id})
		if err != nil {
			return nil, err
		}
		pids := make([]int, 0, len(resp.Processes))
		for _, p := range resp.Processes {
			pids = append(pids, int(p.Pid))
		}
		return pids, nil
	}
}
