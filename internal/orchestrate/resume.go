package orchestrate

import (
	"context"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Resume calls thaw (runc resume), then resumes CUDA in the processes the
// pause suspended. Without a pause record it only thaws, as runc would.
//
// An interrupt does not stop a resume: it only gives back, and stopped
// between the thaw and the CUDA resume it would leave the container
// thawed with its processes held stopped.
func (o *Orchestrator) Resume(ctx context.Context, t Target, thaw func(context.Context) error) error {
	return (&pauseResume{o: o, t: t}).run(ctx, thaw)
}

// pauseResume is one run of Resume: the target and the record of the
// pause it ends.
type pauseResume struct {
	o   *Orchestrator
	t   Target
	rec *pauseRecord // nil: no GPU-free pause, the resume only thaws
}

func (r *pauseResume) run(ctx context.Context, thaw func(context.Context) error) error {
	o, t := r.o, r.t
	ctx, cancel := uninterrupted(ctx)
	defer cancel()
	_, release, err := o.lockFor(t.Lock, "resume", t.ID)
	if err != nil {
		return o.lockError("resume", t.ID, err)
	}
	defer release()
	if r.rec, err = o.pauses().read(t.ID); err != nil {
		o.log().Warn("pause record unreadable: CUDA is not resumed", "id", t.ID, "error", err)
	}
	// Resume is two steps, not a table: a failpoint holds it before each.
	failpoint(o, "resume", StepThaw)
	if _, err := o.step(ctx, t.ID, StepThaw, thaw); err != nil {
		if r.rec != nil && !anyAlive(r.rec.pids()) {
			o.pauses().remove(t.ID) // the processes are gone (a checkpoint with --exit)
		}
		return &report.StepError{Op: "resume", ID: t.ID, Step: StepThaw, Err: err, Outcome: "the container stays paused",
			Remedy: "check the container's state and its cgroup, then retry"}
	}
	if r.rec == nil {
		return nil
	}
	failpoint(o, "resume", StepResume)
	_, err = o.step(ctx, t.ID, StepResume, r.resumePaused)
	o.pauses().remove(t.ID)
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
	_, procs, _, err := r.o.findCUDA(ctx, r.t)
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
	return r.o.driver().Resume(ctx, pids, r.o.setOptions(nil))
}

// failed says that the container was thawed but CUDA did not come back:
// its processes are suspended still, or their GPU state is lost; what
// each process is now is looked at, not assumed.
func (r *pauseResume) failed(ctx context.Context, err error) error {
	id, pids := r.t.ID, r.rec.pids()
	e := &report.StepError{Op: "resume", ID: id, Step: StepResume, Err: fmt.Errorf("%w: %w", ErrPauseResume, err),
		Outcome: "the container is thawed, but " + procsNow(pids),
		Remedy:  "run `cryo cuda resume " + pidList(pids) + "`"}
	if lost := r.o.driver().LostPIDs(ctx, pids, err); len(lost) > 0 {
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
	s := &suspension{o: r.o, t: r.t}
	_, _ = r.o.step(ctx, r.t.ID, StepWakeHook, func(ctx context.Context) error { s.wake(ctx); return nil })
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
