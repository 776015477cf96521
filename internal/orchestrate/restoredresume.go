package orchestrate

import (
	"context"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/fixup"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// resumeRestored is one ResumeRestored.
func resumeRestored(ctx context.Context, e env, t Target, m *manifest.Manifest) error {
	return (&restoredResume{e: e, t: t, m: m}).run(ctx)
}

// restoredResume is one run of ResumeRestored, a sequence of one step:
// the restore's own resume step runs it, and front ends call it alone.
type restoredResume struct {
	e    env
	t    Target
	m    *manifest.Manifest
	lock *lock.Lock // the target's, held for the run
	// unlisted are the suspended processes a manifest without CUDA does
	// not list (unlistedSuspended), found before the lock is taken.
	unlisted []int
}

func (r *restoredResume) run(ctx context.Context) error {
	e, t, m := r.e, r.t, r.m
	fixup.UpLoopback(e.log, t.ID, t.InitPID)
	resume := r.resumeListed
	if !m.HasCUDA() {
		if r.unlisted = r.unlistedSuspended(ctx); len(r.unlisted) == 0 {
			return nil // no suspended CUDA process: a CPU checkpoint, as the manifest says
		}
		resume = r.resumeUnlisted
	}
	l, release, err := e.locks.hold(t.Lock, "restore", t.ID)
	if err != nil {
		return e.locks.refused("restore", t.ID, err)
	}
	defer release()
	r.lock = l
	seq := &runner{stepper: e.stepper, op: "restore", id: t.ID, steps: []step{{name: StepResume, do: resume}},
		// Only a manifest that lists CUDA processes times their resume.
		record: func(s StepName, d time.Duration, _ error) {
			if m.HasCUDA() {
				m.RestoreSteps = append(m.RestoreSteps, manifest.Step{Name: string(s), Seconds: d.Seconds()})
			}
		},
		failed: func(ctx context.Context, _ StepName, err error, _ string) error {
			return resumeError(context.WithoutCancel(ctx), t, err)
		},
	}
	return seq.run(ctx)
}

// resumeListed resumes the restored processes of a manifest that lists
// CUDA processes, on the GPUs the check paired theirs with.
func (r *restoredResume) resumeListed(ctx context.Context) error {
	e, t, m := r.e, r.t, r.m
	if all, err := t.PIDs(ctx); err == nil {
		cuda.AwaitHeld(all, heldSettle)
	}
	pids, procs, _, err := e.gpu.find(ctx, t)
	if err != nil {
		return err
	}
	if err := r.lock.AddPIDs(pids); err != nil {
		return err
	}
	var suspended []int
	for _, p := range procs {
		if p.State == cuda.StateCheckpointed || p.State == cuda.StateLocked {
			suspended = append(suspended, p.PID)
		}
	}
	if len(suspended) == 0 && len(procs) > 0 {
		// Something else (a CRIU action script) resumed them already.
		e.log.Info("restored CUDA processes already running", "id", t.ID, "pids", pids)
		return nil
	}
	if len(suspended) == 0 {
		return fmt.Errorf("none of the restored processes %v is a CUDA process, but the manifest lists %d: %w", pids, len(m.Processes), cuda.ErrBadState)
	}
	fixup.JoinSpecCgroup(e.log, t.ID, t.Scope.Cgroup, pids)
	if err := prepareNodes(t); err != nil {
		return err
	}
	opts := e.gpu.opts(nil)
	if opts.PIDPairs, err = r.restorePairs(ctx, suspended); err != nil {
		return err
	}
	line := taskFrom(ctx)
	line.SetTotal(allGPUBytes(m))
	if rate := recordedCopyRate(m); rate > 0 {
		line.SetRate(rate)
	}
	return e.gpu.driver.Resume(ctx, suspended, opts)
}

// heldSettle bounds the wait for restored CUDA processes to show the stop
// they were dumped in (cuda.AwaitHeld).
const heldSettle = 2 * time.Second

// unlistedSuspended are the restored processes whose CUDA state is
// suspended although the manifest lists none (a checkpoint of another
// tool, or an altered manifest): left so, they would hang at their next
// CUDA call while the restore reported success. It warns of their resume.
func (r *restoredResume) unlistedSuspended(ctx context.Context) []int {
	_, procs, _, err := r.e.gpu.find(ctx, r.t)
	if err != nil || len(procs) == 0 {
		return nil // no CUDA process: a CPU checkpoint, as the manifest says
	}
	var suspended []int
	for _, p := range procs {
		if p.State == cuda.StateCheckpointed || p.State == cuda.StateLocked {
			suspended = append(suspended, p.PID)
		}
	}
	if len(suspended) > 0 {
		r.e.log.Warn("restored processes hold suspended CUDA state that the checkpoint's manifest does not list: resuming them on the GPUs they had", "id", r.t.ID, "pids", suspended)
	}
	return suspended
}

// resumeUnlisted resumes the unlisted suspended processes on the GPUs they
// had.
func (r *restoredResume) resumeUnlisted(ctx context.Context) error {
	if err := r.lock.AddPIDs(r.unlisted); err != nil {
		return err
	}
	if err := prepareNodes(r.t); err != nil {
		return err
	}
	return r.e.gpu.driver.Resume(ctx, r.unlisted, r.e.gpu.opts(nil))
}

// prepareNodes gives a restored container the GPU device nodes of its
// spec before the driver opens them.
func prepareNodes(t Target) error {
	if len(t.Scope.Nodes) == 0 || t.InitPID <= 0 {
		return nil
	}
	return fixup.SyncNodes(t.InitPID, t.Scope.Nodes)
}

// restorePairs finds each restored process's GPU pairs by its NSPID (the
// pid it had in its container at checkpoint, which CRIU restores).
func (r *restoredResume) restorePairs(ctx context.Context, pids []int) (map[int][]cuda.GPUPair, error) {
	t, m := r.t, r.m
	if m.RestorePairs == nil || t.Scope.Deferred {
		scope := t.Scope
		if scope.Deferred && t.InitPID > 0 {
			scope = ScopeFromRoot(t.InitPID)
		}
		var err error
		if m.RestorePairs, err = r.e.host.check(ctx, m, scope); err != nil {
			return nil, err
		}
	}
	out := map[int][]cuda.GPUPair{}
	for _, pid := range pids {
		pairs, ok := m.PairsFor(cuda.NSPID(pid))
		if !ok && m.PerProcess() {
			return nil, fmt.Errorf("restored process %d (pid %d in its container) is not one the checkpoint recorded: %w", pid, cuda.NSPID(pid), cuda.ErrBadState)
		}
		out[pid] = pairs
	}
	return out, nil
}
