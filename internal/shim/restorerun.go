package shim

import (
	"context"
	"fmt"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Why a restore's Start notes what comes for its task meanwhile. The
// restore (CRIU, then the CUDA resume) runs inside Start, and containerd
// learns the task's pid only from Start's answer. A StartContainer that
// its client cut off makes containerd's CRI (1.7 and 2.x) delete the task
// with WithProcessKill, which kills no task whose pid it has not learnt,
// and which sends the Delete only when the task's state reads created
// (a running one it refuses on its own side). Unnoticed, the restore
// would finish on its own and leave a workload running that CRI shows as
// exited and that neither CRI nor the pod's removal can end. So, while a
// restore's Start is in flight:
//   - State reads created, with no pid: what containerd knows of it, and
//     what the runc shim itself reports during runc restore;
//   - a Delete, a Shutdown or a SIGKILL ends the restore early where that
//     is safe: before CRIU nothing is restored, CRIU is stopped and what
//     it restored removed, and a CUDA resume that began completes (a tree
//     killed mid-resume could leave GPU state behind);
//   - when Start ends, the shim does what the request meant: a Delete, a
//     Shutdown or a SIGKILL kills the restored tree and waits until the
//     runc service has reaped it (and published its TaskExit), another
//     signal is delivered, and the requests are answered: the Delete with
//     the real exit status, from the runc service.

// ErrRestoreGivenUp: the task was deleted or killed while its restore ran.
var ErrRestoreGivenUp = report.Sentinel("the task was ended while its restore ran", errdefs.ErrAborted)

// ErrRestoreInFlight: a request for a task whose restore still runs could
// not wait for its end.
var ErrRestoreInFlight = report.Sentinel("the task's restore is still in flight", errdefs.ErrUnavailable)

// restoreRun is a restore's Start in flight, and what came for its task.
type restoreRun struct {
	id     string
	cancel context.CancelCauseFunc // ends the restore early, where safe
	done   chan struct{}           // closed once Start ended and acted on the notes
	// creating: the run is the restore's Create, not its Start
	// (createrun.go): a Delete or Shutdown ends it, a Kill goes to runc.
	creating bool

	// Under service.mu.
	step   string      // the restore's step in progress
	ending string      // "delete", "shutdown" or "kill": the request that ends the task; "" none
	ended  bool        // the shim has acted on ending
	kills  []*killNote // signals to deliver once Start has ended
	// endErr is the kill of the restored tree, once ended.
	endErr error
}

// killNote is a Kill that came during the restore, and its delivery.
type killNote struct {
	r   *taskv3.KillRequest
	err error // once the run's done is closed
}

// reapWait bounds the wait for the runc service to reap a killed tree.
const reapWait = 30 * time.Second

// answerMargin is how long before its caller's deadline a waiting request
// answers: an answer past the deadline reaches nobody.
const answerMargin = time.Second

// takeStart takes the restore Create recorded for task id and notes its
// Start in flight, under one lock: a Delete that comes meanwhile finds
// the one or the other. ctx is the restore's, which the run cancels.
func (s *service) takeStart(ctx context.Context, id string) (context.Context, *restoreRun, pendingRestore, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pending, ok := s.restores[id]
	if !ok {
		return ctx, nil, pending, false
	}
	delete(s.restores, id)
	ctx, cancel := context.WithCancelCause(ctx)
	run := &restoreRun{id: id, cancel: cancel, done: make(chan struct{})}
	if s.starts == nil {
		s.starts = map[string]*restoreRun{}
	}
	s.starts[id] = run
	return ctx, run, pending, true
}

// inFlight is the restore's Start in flight for task id; nil if none.
func (s *service) inFlight(id string) *restoreRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts[id]
}

// atStep records the restore's step in progress, for the errors.
func (s *service) atStep(run *restoreRun, step string) {
	s.mu.Lock()
	run.step = step
	s.mu.Unlock()
}

// noteEnd records a request that ends the task (op: "delete", "shutdown",
// "kill") and ends the restore early where safe; false if run's Start
// has ended meanwhile: the request then goes to the runc service.
func (s *service) noteEnd(ctx context.Context, run *restoreRun, op string) bool {
	return s.note(ctx, run, op, nil)
}

// note records a Kill (k, nil: none) and a request that ends the task (op,
// "": none), under one lock: Start's end sees both or neither. The first
// ending cancels the restore. false: run's Start has ended, nothing noted.
func (s *service) note(ctx context.Context, run *restoreRun, op string, k *killNote) bool {
	s.mu.Lock()
	if s.starts[run.id] != run {
		s.mu.Unlock()
		return false
	}
	if k != nil {
		run.kills = append(run.kills, k)
	}
	first := op != "" && run.ending == ""
	if first {
		run.ending = op
	}
	step := run.step
	s.mu.Unlock()
	if first && run.creating {
		run.cancel(fmt.Errorf("%w: %s of the task came while its restore was checked: %w", ErrCreateGivenUp, op, context.Canceled))
		log.G(ctx).WithFields(log.Fields{"id": run.id, "step": step, "request": op}).
			Warn("cryo: restore given up during its create: the checks stop at their next step, what the create made is removed, then the request is answered")
	} else if first {
		run.cancel(fmt.Errorf("%w: %s of the task came while its restore ran: %w", ErrRestoreGivenUp, op, context.Canceled))
		log.G(ctx).WithFields(log.Fields{"id": run.id, "step": step, "request": op}).
			Warn("cryo: restore given up: the task is ended when its restore stops (early where safe), then the request is answered")
	}
	return true
}

// awaitStart waits until run's Start has ended and acted on the notes, or
// until just before ctx's deadline: then the error says so, for op.
func (s *service) awaitStart(ctx context.Context, run *restoreRun, op string) error {
	var answer <-chan time.Time // nil: no deadline, wait for ctx alone
	if d, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(d) - answerMargin)
		defer t.Stop()
		answer = t.C
	}
	select {
	case <-run.done:
		return nil
	case <-answer:
	case <-ctx.Done():
	}
	s.mu.Lock()
	step := run.step
	s.mu.Unlock()
	return &report.StepError{Op: op, ID: run.id, Step: step, Err: ErrRestoreInFlight,
		Outcome: "the restore goes on to the end of its step; the shim then ends the task, and containerd gets its exit",
		Remedy:  "delete the task once its exit is reported (containerd's CRI does so on the exit event)"}
}

// endStart acts on what came during the restore's Start, once the restore
// has ended (resp, err: Start's answer), and returns Start's answer: an
// error where a request ended the task.
func (s *service) endStart(ctx context.Context, run *restoreRun, resp *taskv3.StartResponse, err error) (*taskv3.StartResponse, error) {
	ctx = context.WithoutCancel(ctx)
	defer close(run.done)
	for {
		s.mu.Lock()
		ending, ended, kills := run.ending, run.ended, run.kills
		run.kills, run.ended = nil, run.ending != ""
		if (ending == "" || ended) && len(kills) == 0 {
			delete(s.starts, run.id)
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
		if ending != "" && !ended {
			run.endErr = s.killTree(ctx, run.id)
			s.logEnded(ctx, run, ending)
			if err == nil {
				resp, err = nil, toGRPC(s.endedError(run, "restore", ending), false)
			}
		}
		for _, k := range kills {
			k.err = s.deliver(ctx, run, k.r)
		}
	}
	return resp, err
}

// deliver is a Kill noted during the restore: SIGKILL was the tree's
// kill, any other signal goes to the task now.
func (s *service) deliver(ctx context.Context, run *restoreRun, r *taskv3.KillRequest) error {
	if r.Signal == uint32(unix.SIGKILL) {
		return run.endErr
	}
	_, err := s.TTRPCTaskService.Kill(ctx, r)
	return err
}

// killTree kills every process of task id that a restore left running
// (SIGKILL to all of them) and waits until the runc service has reaped
// the init: it then publishes the TaskExit and can delete the task. A
// task that never started (the restore stopped before runc's, or failed
// and was removed) has nothing to kill.
func (s *service) killTree(ctx context.Context, id string) error {
	if !s.alive(ctx, id) {
		return nil
	}
	_, err := s.TTRPCTaskService.Kill(ctx, &taskv3.KillRequest{ID: id, Signal: uint32(unix.SIGKILL), All: true})
	if err != nil && !errdefs.IsNotFound(errgrpc.ToNative(err)) {
		return fmt.Errorf("kill the restored processes: %w", err)
	}
	for end := time.Now().Add(reapWait); s.alive(ctx, id); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			return fmt.Errorf("the restored init was killed but is not reaped after %s", reapWait)
		}
	}
	return nil
}

// alive reports whether the runc service has a started task id whose
// init has not exited.
func (s *service) alive(ctx context.Context, id string) bool {
	st, err := s.TTRPCTaskService.State(ctx, &taskv3.StateRequest{ID: id})
	if err != nil {
		return false
	}
	return st.Status != task.Status_CREATED && st.Status != task.Status_STOPPED
}

// logEnded says what became of a task a request ended during its restore.
func (s *service) logEnded(ctx context.Context, run *restoreRun, ending string) {
	entry := log.G(ctx).WithFields(log.Fields{"id": run.id, "request": ending})
	if run.endErr != nil {
		entry.WithError(run.endErr).Error("cryo: the restored task could not be ended after its restore was given up")
		return
	}
	entry.Warn("cryo: restore given up: the restored processes were killed and reaped")
}

// endedError is the error, for a request op, of a restore whose task the
// request ending ended.
func (s *service) endedError(run *restoreRun, op, ending string) error {
	s.mu.Lock()
	step := run.step
	s.mu.Unlock()
	se := &report.StepError{Op: op, ID: run.id, Step: step,
		Err:     fmt.Errorf("%w (%s)", ErrRestoreGivenUp, ending),
		Outcome: "the restored processes were killed and reaped: nothing of the restore runs",
		Remedy:  "start the container again: the checkpoint was not changed"}
	if run.endErr != nil {
		se.Outcome = "the restored processes could not all be killed (" + run.endErr.Error() + ")"
		se.Remedy = "kill them (`runc kill --all " + run.id + " KILL` with containerd's runc root) and delete the task again"
	}
	return se
}

// State reads created, with no pid, for a task whose restore's Start is
// in flight: containerd has not learnt its pid yet, and its client
// deletes only a task that reads so (see above).
func (s *service) State(ctx context.Context, r *taskv3.StateRequest) (*taskv3.StateResponse, error) {
	resp, err := s.TTRPCTaskService.State(ctx, r)
	if err != nil || r.ExecID != "" || s.inFlight(r.ID) == nil {
		return resp, err
	}
	resp.Status, resp.Pid = task.Status_CREATED, 0
	return resp, nil
}

// Kill of a task whose restore's Start is in flight waits for the Start's
// end, and its signal is delivered then: a SIGKILL ends the restore early
// where safe and kills the whole tree; another signal leaves the restore
// to complete. Any other Kill goes to the runc service.
func (s *service) Kill(ctx context.Context, r *taskv3.KillRequest) (*emptypb.Empty, error) {
	run := s.inFlight(r.ID)
	if run == nil || r.ExecID != "" || run.creating {
		return s.TTRPCTaskService.Kill(ctx, r)
	}
	note, op := &killNote{r: r}, ""
	if r.Signal == uint32(unix.SIGKILL) {
		op = "kill"
	}
	if !s.note(ctx, run, op, note) {
		return s.TTRPCTaskService.Kill(ctx, r)
	}
	if err := s.awaitStart(ctx, run, "kill"); err != nil {
		return nil, toGRPC(err, false)
	}
	if note.err != nil {
		return nil, note.err
	}
	return &emptypb.Empty{}, nil
}

// Shutdown while restores' Starts are in flight ends them as a Delete
// would (containerd holds no pid of their tasks, and the shim is asked
// to go), then goes to the runc service, which stops the shim only when
// it serves no task.
func (s *service) Shutdown(ctx context.Context, r *taskv3.ShutdownRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	runs := make([]*restoreRun, 0, len(s.starts))
	for _, run := range s.starts {
		runs = append(runs, run)
	}
	s.mu.Unlock()
	noted := runs[:0]
	for _, run := range runs {
		if s.noteEnd(ctx, run, "shutdown") {
			noted = append(noted, run)
		}
	}
	for _, run := range noted {
		if err := s.awaitStart(ctx, run, "shutdown"); err != nil {
			return nil, toGRPC(err, false)
		}
	}
	return s.TTRPCTaskService.Shutdown(ctx, r)
}
