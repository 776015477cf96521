package orchestrate

import (
	"context"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// pauseResume is one run of Resume: the target and the record of the
// pause it ends.
type pauseResume struct {
	e   env
	t   Target
	rec *pauseRecord // nil: no GPU-free pause, the resume only thaws
}

func (r *pauseResume) run(ctx context.Context, thaw func(context.Context) error) error {
	e, t := r.e, r.t
	ctx, cancel := uninterrupted(ctx)
	defer cancel()
	_, release, err := e.locks.hold(t.Lock, "resume", t.ID)
	if err != nil {
		return e.locks.refused("resume", t.ID, err)
	}
	defer release()
	if r.rec, err = e.locks.pauses().read(t.ID); err != nil {
		e.log.Warn("pause record unreadable: CUDA is not resumed", "id", t.ID, "error", err)
	}
	// Resume is two steps, not a table: a failpoint holds it before each.
	e.stepper.hold("resume", StepThaw)
	if _, err := e.stepper.take(ctx, t.ID, StepThaw, thaw); err != nil {
		if r.rec != nil && !anyAlive(r.rec.pids()) {
			e.locks.pauses().remove(t.ID) // the processes are gone (a checkpoint with --exit)
		}
		return &report.StepError{Op: "resume", ID: t.ID, Step: StepThaw, Err: err, Outcome: "the container stays paused",
			Remedy: "check the container's state and its cgroup, then retry"}
	}
	if r.rec == nil {
		return nil
	}
	e.stepper.hold("resume", StepResume)
	_, err = e.stepper.take(ctx, t.ID, StepResume, r.resumePaused)
	e.locks.pauses().remove(t.ID)
	if err != nil {
		return r.failed(ctx, err)
	}
	r.wake(ctx)
	return nil
}

// resumePaused resumes the record's processes that the driver still
// reports suspended: a process that exited, or that someone else resumed
// (`cryo cuda resume`), is not resumed twice.
func (r *pauseResume) resumePaused(ctx context.Context) error {
	_, procs, _, err := r.e.gpu.find(ctx, r.t)
	if err != nil {
		return err
	}
	var pids []int
	for _, p := range procs {
		if _, ok := r.rec.owns(p.PID); ok && p.State == cuda.StateCheckpointed {
			pids = append(pids, p.PID)
		}
	}
	if len(pids) == 0 {
		return nil
	}
	return r.e.gpu.driver.Resume(ctx, pids, r.e.gpu.opts(nil))
}

// failed says that the container was thawed but CUDA did not come back:
// its processes are suspended still, or their GPU state is lost; what
// each process is now is looked at, not assumed.
func (r *pauseResume) failed(ctx context.Context, err error) error {
	id, pids := r.t.ID, r.rec.pids()
	e := &report.StepError{Op: "resume", ID: id, Step: StepResume, Err: fmt.Errorf("%w: %w", ErrPauseResume, err),
		Outcome: "the container is thawed, but " + procsNow(pids),
		Remedy:  "run `cryo cuda resume " + pidList(pids) + "`"}
	if lost := r.e.gpu.driver.LostPIDs(ctx, pids, err); len(lost) > 0 {
		e.Outcome = "the container is thawed, but the GPU state of processes " + fmt.Sprint(lost) + " is lost; " + procsNow(pids)
		e.Remedy = "restart the container (or restore it from a checkpoint)"
	}
	return e
}

// wake wakes the server that a GPU-free pause put to sleep, once its CUDA
// runs again.
func (r *pauseResume) wake(ctx context.Context) {
	if r.t.PreCheckpoint == nil {
		return
	}
	_, _ = r.e.stepper.take(ctx, r.t.ID, StepWakeHook, func(ctx context.Context) error { wake(ctx, r.e.log, r.t); return nil })
}

// anyAlive reports whether one of pids still runs: a zombie is a process
// that died, whose GPU state nobody will resume.
func anyAlive(pids []int) bool {
	for _, p := range pids {
		if procfs.Alive(p) {
			return true
		}
	}
	return false
}
