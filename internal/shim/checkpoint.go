package shim

import (
	"cmp"
	"context"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/core/runtime"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// checkpointRun is one checkpoint: its request, the task's state before it,
// and the step timings that end up in the log.
type checkpointRun struct {
	req       *taskv3.CheckpointTaskRequest
	exit      bool              // --exit: the task stops after the dump
	workDir   string            // CRIU's work directory when it is not the image directory
	wasPaused bool              // containerd paused (froze) the task before calling us
	bundle    string            // the task's bundle, where the checkpoint's record goes (ckptrecord.go)
	lock      *lock.Lock        // the task's lock, held by begin for the whole run
	pre, wake *orchestrate.Hook // the container's hooks, from its spec's annotations
	start     time.Time
	dumpStart time.Time
	dumpTime  time.Duration
}

// Checkpoint runs cryo's sequence around runc's checkpoint:
//
//	paused by containerd → thaw (runc Resume) → CUDA lock+checkpoint →
//	runc checkpoint (CRIU) → CUDA restore+unlock (unless exit) → pause again
//
// The driver cannot lock the threads of a frozen process, hence the thaw;
// the task is paused again afterwards so that containerd's own Resume,
// which follows every checkpoint, finds the state it expects.
func (s *service) Checkpoint(ctx context.Context, r *taskv3.CheckpointTaskRequest) (*emptypb.Empty, error) {
	l, done, err := s.begin(ctx, r.ID, "checkpoint")
	if err != nil {
		return nil, toGRPC(err, false)
	}
	defer done()
	run, err := s.newCheckpointRun(ctx, r)
	if err != nil {
		return nil, toGRPC(err, false)
	}
	run.lock = l
	if err := s.checkpoint(ctx, run); err != nil {
		return nil, toGRPC(err, false)
	}
	return &emptypb.Empty{}, nil
}

func (s *service) newCheckpointRun(ctx context.Context, r *taskv3.CheckpointTaskRequest) (*checkpointRun, error) {
	run := &checkpointRun{req: r, start: time.Now()}
	if err := upgradeCheckpointOptions(ctx, r); err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: r.ID, Step: "read checkpoint options", Err: err,
			Remedy: "pass runc CheckpointOptions (containerd.runc.v1.CheckpointOptions)"}
	}
	var opts options.CheckpointOptions
	if r.Options != nil {
		if err := typeurl.UnmarshalTo(r.Options, &opts); err != nil {
			return nil, &report.StepError{Op: "checkpoint", ID: r.ID, Step: "read checkpoint options", Err: err,
				Remedy: "pass runc CheckpointOptions (containerd.runc.v1.CheckpointOptions)"}
		}
		run.exit = opts.Exit
	}
	imageDirFromOptions(ctx, r, &opts)
	workDir, err := criuWorkInImage(r, &opts)
	if err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: r.ID, Step: "prepare CRIU's work directory", Err: err,
			Remedy: "pass a work path in the checkpoint options (ctr task checkpoint --work-path DIR)"}
	}
	run.workDir = workDir
	st, err := s.TTRPCTaskService.State(ctx, &taskv3.StateRequest{ID: r.ID})
	if err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: r.ID, Step: "read task state", Err: err}
	}
	run.wasPaused = st.Status == task.Status_PAUSED
	run.bundle = st.Bundle
	if run.pre, run.wake, err = s.hooksOf(r.ID, st.Bundle, "checkpoint"); err != nil {
		return nil, err
	}
	return run, nil
}

func (s *service) checkpoint(ctx context.Context, run *checkpointRun) error {
	id := run.req.ID
	target := s.target(id, run.wasPaused)
	target.CRIUWorkDir = run.workDir
	target.PreCheckpoint, target.Wake = run.pre, run.wake
	target.Lock = run.lock
	// runc, and its CRIU, in a group of their own (dump.go).
	dump := func(ctx context.Context) error {
		run.dumpStart = time.Now()
		err := s.runcDump(ctx, run)
		run.dumpTime = time.Since(run.dumpStart)
		return orchestrate.RuncCRIUError("dump", err)
	}
	rec := run.record(ctx)
	defer run.forget(ctx)
	onStep := func(e orchestrate.Event) {
		if !e.Done && e.ID == id {
			rec.Step = string(e.Step)
			run.keep(ctx, rec)
		}
	}
	_, err := s.orchWith(ctx, onStep).Checkpoint(ctx, target, run.req.Path, !run.exit, dump)
	s.repause(ctx, run)
	s.daemon.renewSpec(ctx, id) // for the next checkpoint, on containerd 1.x
	s.logCheckpoint(ctx, run, err)
	if err != nil {
		return err // a *report.StepError: it names the step, outcome and remedy
	}
	s.copyStatsForCRI(ctx, id, cmp.Or(run.workDir, run.req.Path))
	s.publish(ctx, runtime.TaskCheckpointedEventTopic, &eventstypes.TaskCheckpointed{
		ContainerID: id, Checkpoint: run.req.Path,
	})
	return nil
}

// record writes the record of the checkpoint in flight into the task's
// bundle, for the shim's `delete` should the shim die before it ends.
func (run *checkpointRun) record(ctx context.Context) *ckptRecord {
	rec := &ckptRecord{ID: run.req.ID, Dir: run.req.Path, WorkDir: run.workDir, Exit: run.exit, Started: run.start}
	run.keep(ctx, rec)
	return rec
}

// keep writes rec; a failure costs only what `delete` could say.
func (run *checkpointRun) keep(ctx context.Context, rec *ckptRecord) {
	if err := rec.write(run.bundle); err != nil {
		log.G(ctx).WithError(err).WithField("id", rec.ID).Warn("cryo: could not record the checkpoint in flight in the task's bundle")
	}
}

// forget removes the record: the checkpoint ended, whatever its result.
func (run *checkpointRun) forget(ctx context.Context) {
	if err := removeCkptRecord(run.bundle); err != nil {
		log.G(ctx).WithError(err).WithField("id", run.req.ID).Warn("cryo: could not remove the record of the checkpoint from the task's bundle")
	}
}

// repause freezes the task again if containerd had paused it and it still
// runs, so that containerd's Resume after the checkpoint is consistent.
func (s *service) repause(ctx context.Context, run *checkpointRun) {
	if !run.wasPaused {
		return
	}
	st, err := s.TTRPCTaskService.State(ctx, &taskv3.StateRequest{ID: run.req.ID})
	if err != nil || st.Status != task.Status_RUNNING {
		return
	}
	if _, err := s.TTRPCTaskService.Pause(ctx, &taskv3.PauseRequest{ID: run.req.ID}); err != nil {
		log.G(ctx).WithError(err).WithField("id", run.req.ID).Warn("cryo: could not pause the task again after checkpoint")
	}
}

func (s *service) logCheckpoint(ctx context.Context, run *checkpointRun, err error) {
	total := time.Since(run.start)
	fields := log.Fields{
		"id":              run.req.ID,
		"image_path":      run.req.Path,
		"exit":            run.exit,
		"was_paused":      run.wasPaused,
		"total_ms":        total.Milliseconds(),
		"criu_dump_ms":    run.dumpTime.Milliseconds(),
		"cuda_suspend_ms": sinceOrZero(run.start, run.dumpStart).Milliseconds(),
	}
	if !run.dumpStart.IsZero() {
		fields["cuda_resume_ms"] = (total - run.dumpStart.Sub(run.start) - run.dumpTime).Milliseconds()
	}
	entry := log.G(ctx).WithFields(fields)
	if err != nil {
		entry.WithError(err).Error("cryo: checkpoint failed")
		return
	}
	entry.Info("cryo: checkpoint done")
}

// sinceOrZero is b-a, or 0 when b never happened.
func sinceOrZero(a, b time.Time) time.Duration {
	if b.IsZero() {
		return 0
	}
	return b.Sub(a)
}

func (s *service) publish(ctx context.Context, topic string, event interface{}) {
	if s.publisher == nil {
		return
	}
	if err := s.publisher.Publish(ctx, topic, event); err != nil {
		log.G(ctx).WithError(err).WithField("topic", topic).Warn("cryo: publish event")
	}
}
