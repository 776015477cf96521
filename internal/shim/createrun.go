package shim

import (
	"context"
	"fmt"
	"strings"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Why a restore's Create is a run too. The checks of a restore (the pull
// or read of the checkpoint, its unpack and verification, the confine
// and ports checks) run inside the task's Create, and can take a while.
// When containerd gives up on that Create (the kubelet's request timed
// out, or its client went away), it deletes the task and, for a shim of
// its own, shuts the shim down, while the Create is still held: the Create
// would carry on and leave a created restore (its work directory, a runc
// container in created state, the record of a restore to start) that
// nothing starts or deletes. So a restore's Create is noted as a run in
// flight, with the pieces of a Start's (restorerun.go):
//   - its context is containerd's request context, cancelled too when a
//     Delete or Shutdown of the task comes meanwhile: the checks stop at
//     the next step;
//   - where the Create ends, what it made goes (the runc service's task
//     and mounts, the work directory, containerd's unpacked copy, the
//     lines added to the bundle's CRIU configuration) when the request's
//     context has ended or a Delete or Shutdown came, and the Create
//     answers a typed error; a checkpoint the user gave is never removed;
//   - the Delete or Shutdown is answered once the Create has ended.

// ErrCreateGivenUp: containerd gave up on the task's Create, or deleted
// the task, while its restore was being checked.
var ErrCreateGivenUp = report.Sentinel("the task's create was given up while its restore was checked", errdefs.ErrAborted)

// createRunKey carries a restore's Create run in its context.
type createRunKey struct{}

// runCreate runs create, a restore's Create of task id, as a run in
// flight: the context create gets ends with containerd's request or with
// a Delete or Shutdown of the task (see above).
func (s *service) runCreate(ctx context.Context, id string, create func(context.Context) (*taskv3.CreateTaskResponse, error)) (*taskv3.CreateTaskResponse, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	run := &restoreRun{id: id, cancel: cancel, done: make(chan struct{}), creating: true}
	s.mu.Lock()
	if s.starts == nil {
		s.starts = map[string]*restoreRun{}
	}
	s.starts[id] = run
	s.mu.Unlock()
	defer s.endCreate(run)
	resp, err := create(context.WithValue(ctx, createRunKey{}, run))
	if err != nil && s.cutCause(ctx, run) != nil {
		err = s.cutError(ctx, run, err)
		log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: create given up: nothing of the restore is left")
		err = toGRPC(err, false)
	}
	return resp, err
}

// endCreate forgets the run, if the Create recorded no restore for Start,
// and answers the requests that wait for it.
func (s *service) endCreate(run *restoreRun) {
	s.endCreateRun(run)
	close(run.done)
}

// endCreateRun forgets the run: requests for the task from now on go
// where they would without it.
func (s *service) endCreateRun(run *restoreRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.starts[run.id] == run {
		delete(s.starts, run.id)
	}
}

// createRunOf is the Create run ctx carries; nil outside one.
func createRunOf(ctx context.Context) *restoreRun {
	run, _ := ctx.Value(createRunKey{}).(*restoreRun)
	return run
}

// cutCause says why a Create run was given up: a Delete or Shutdown
// noted, or the end of containerd's request; nil while it goes on.
func (s *service) cutCause(ctx context.Context, run *restoreRun) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cutCauseLocked(ctx, run)
}

// cutCauseLocked is cutCause with s.mu held.
func (s *service) cutCauseLocked(ctx context.Context, run *restoreRun) error {
	if run == nil {
		return nil
	}
	if run.ending != "" {
		return fmt.Errorf("%s of the task came", run.ending)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("containerd's request ended: %w", context.Cause(ctx))
	}
	return nil
}

// cutError is the error of a Create given up at its run's step; err,
// the Create's own error as containerd would have had it, is the cause.
func (s *service) cutError(ctx context.Context, run *restoreRun, err error) error {
	s.mu.Lock()
	step := run.step
	s.mu.Unlock()
	if step == "" {
		step = "check the restore"
	}
	cause := fmt.Errorf("%w (%w)", ErrCreateGivenUp, s.cutCause(ctx, run))
	// The checks' own error is kept, unless it only says that this very
	// cut stopped them.
	if native := errgrpc.ToNative(err); !strings.Contains(native.Error(), ErrCreateGivenUp.Error()) {
		cause = fmt.Errorf("%w: %w", cause, native)
	}
	return &report.StepError{Op: "create", ID: run.id, Step: step, Err: cause,
		Outcome: "nothing was restored; the shim removed what the create had made (work directory, runc task, mounts) and kept the checkpoint",
		Remedy:  "start the container again; if the caller's deadline cut the restore, give it more time (the kubelet's --runtime-request-timeout)"}
}

// createTask is the runc service's Create of a checked restore, unless
// the Create was given up meanwhile (the safe point after the checks).
// runc's create is not cut half-way: it runs to its end, and a Create
// given up during it is undone at restoreCreated.
func (s *service) createTask(ctx context.Context, r *taskv3.CreateTaskRequest) (*taskv3.CreateTaskResponse, error) {
	run := createRunOf(ctx)
	s.orch(ctx).Hold("restore", orchestrate.StepCreateTask)
	if cause := s.cutCause(ctx, run); cause != nil {
		return nil, fmt.Errorf("the runc task was not created: %w", cause)
	}
	if run != nil {
		s.atStep(run, "create the runc task")
	}
	return s.TTRPCTaskService.Create(context.WithoutCancel(ctx), r)
}

// createChecked creates the runc task of a checked restore and records it
// for Start. afterCreate, if set, runs between the two (the rootfs diff of
// an image restore); whatever fails undoes what was made, so that a
// refused or given-up Create leaves nothing behind.
func (s *service) createChecked(ctx context.Context, r *taskv3.CreateTaskRequest, pending pendingRestore, started time.Time, afterCreate func() error) (*taskv3.CreateTaskResponse, error) {
	resp, err := s.createTask(ctx, r)
	if err != nil {
		s.undoCreate(ctx, r.ID, pending, false)
		return nil, err
	}
	if afterCreate != nil {
		if err := afterCreate(); err != nil {
			s.undoCreate(ctx, r.ID, pending, true)
			return nil, err
		}
	}
	if err := s.restoreCreated(ctx, r, pending, started); err != nil {
		return nil, err
	}
	return resp, nil
}

// commitCreate records a checked restore whose task the runc service
// created, for Start, and ends the Create run, under one lock: a Delete
// that comes meanwhile finds the one or the other. A Create given up
// meanwhile is undone instead, and the error says so.
func (s *service) commitCreate(ctx context.Context, r *taskv3.CreateTaskRequest, pending pendingRestore) error {
	run := createRunOf(ctx)
	s.mu.Lock()
	cause := s.cutCauseLocked(ctx, run)
	if cause == nil {
		s.restores[r.ID] = pending
		if run != nil && s.starts[r.ID] == run {
			delete(s.starts, r.ID)
		}
	}
	s.mu.Unlock()
	if cause == nil {
		return nil
	}
	s.undoCreate(ctx, r.ID, pending, true)
	return fmt.Errorf("the created task was deleted again: %w", cause)
}

// undoCreate removes what a checked restore's Create made: the runc
// service's task (its state, its init, the rootfs mounts) when created,
// the work directory, containerd's unpacked copy and the bundle's CRIU
// configuration lines. The checkpoint the request named is never touched
// unless it is one of those copies.
func (s *service) undoCreate(ctx context.Context, id string, pending pendingRestore, created bool) {
	ctx = context.WithoutCancel(ctx)
	if created {
		s.deleteCreated(ctx, id)
	}
	removeWork(ctx, id, pending.work)
	removeContainerdCopy(ctx, id, pending.ctrdCopy)
	if pending.tcp {
		endRestoreTCP(ctx, id, pending.bundle)
	}
	disarmOutcome(ctx, id, pending.armed)
	log.G(ctx).WithField("id", id).Warn("cryo: restore given up during its create: what the create made was removed")
}

// stepNoter records a Create run's step from the checks' step events.
func (s *service) stepNoter(ctx context.Context) func(orchestrate.Event) {
	run := createRunOf(ctx)
	if run == nil {
		return nil
	}
	// A step the cut stops before sends no event: the run names the
	// last one begun, or the one after which it stopped.
	return func(e orchestrate.Event) {
		if e.Done {
			s.atStep(run, "after "+string(e.Step))
		} else {
			s.atStep(run, string(e.Step))
		}
	}
}
