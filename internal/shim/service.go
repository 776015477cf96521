package shim

import (
	"context"
	"os"
	"sync"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/confine/outcome"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// service is containerd's runc task service with cryo's orchestration on
// Checkpoint, and on Create and Start of a restored task. Every other call
// goes to the runc service unchanged.
type service struct {
	taskv3.TTRPCTaskService // the runc task service

	// cfg is the configuration read once when the shim started, from the
	// environment containerd gave it.
	cfg       config.Config
	publisher shim.Publisher
	daemon    *legacyDaemon // containerd itself, for the 1.x spec remedy

	mu       sync.Mutex
	restores map[string]pendingRestore // task id -> checked restore, between Create and Start
	// busy holds, by task id, the lock of each checkpoint or restore in
	// flight in this shim: the very lock its run hands to the
	// orchestration, not a second record. It is kept here too because
	// requests that must not take the lock still ask for it: a Pause
	// refused under a run (a freeze-only pause never takes one), and the
	// stop on a signal, which waits for this shim's runs and names them.
	// The lock directory cannot say which holder is this shim.
	busy     map[string]*lock.Lock
	starts   map[string]*restoreRun // task id -> its restore's Start in flight (restorerun.go)
	stopping string                 // the signal the shim stops on, once it came (stopping.go)
}

var _ shim.TTRPCService = (*service)(nil)

func newService(inner taskv3.TTRPCTaskService, publisher shim.Publisher, grpcAddress string) *service {
	return &service{
		TTRPCTaskService: inner,
		cfg:              config.FromEnv(),
		publisher:        publisher,
		daemon:           newLegacyDaemon(grpcAddress),
		restores:         map[string]pendingRestore{},
		busy:             map[string]*lock.Lock{},
		starts:           map[string]*restoreRun{},
	}
}

// orch is the orchestration for one request: its step events become
// containerd log entries with the step's duration as a field.
func (s *service) orch(ctx context.Context) *orchestrate.Orchestrator {
	return s.orchWith(ctx, nil)
}

// orchWith is orch whose step events also go to onStep (nil: none).
func (s *service) orchWith(ctx context.Context, onStep func(orchestrate.Event)) *orchestrate.Orchestrator {
	return orchestrate.New(
		// The driver runs every CUDA call in a child process with a
		// deadline; the shim itself never calls the driver.
		orchestrate.WithConfig(s.cfg),
		// A task whose shim dies is killed by containerd: the driver's
		// helpers die with the shim rather than finish their call.
		orchestrate.WithDriverOptions(shimDriverOptions(s.cfg)),
		orchestrate.WithLogger(newEntryLogger(ctx)),
		orchestrate.WithEvents(func(e orchestrate.Event) {
			logStep(ctx, e)
			if onStep != nil {
				onStep(e)
			}
		}),
		orchestrate.WithFrontEnd(remedies),
	)
}

func logStep(ctx context.Context, e orchestrate.Event) {
	entry := log.G(ctx).WithFields(log.Fields{"id": e.ID, "step": string(e.Step)})
	switch {
	case !e.Done:
		entry.Debug("cryo: step started")
	case e.Err != nil:
		entry.WithField("elapsed_ms", e.Elapsed.Milliseconds()).WithError(e.Err).Warn("cryo: step failed")
	default:
		entry.WithField("elapsed_ms", e.Elapsed.Milliseconds()).Info("cryo: step done")
	}
}

// RegisterTTRPC serves the task API under its v2 and v3 names.
func (s *service) RegisterTTRPC(server *ttrpc.Server) error {
	return registerTaskAPI(server, s)
}

// begin marks a task busy with a checkpoint or restore for the whole run,
// in this shim and in cryo's lock that every front end takes (cryo-runc
// and the bare CLI on the task's pids collide with it); a second run for
// the same task fails at once rather than interleave with the first. The
// returned lock goes to the orchestration (Target.Lock, Restorer.Lock).
func (s *service) begin(ctx context.Context, id, step string) (*lock.Lock, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.busy[id]; ok {
		return nil, nil, busyError(id, step, held.Op())
	}
	if err := s.stoppingLocked(id, step); err != nil {
		return nil, nil, err
	}
	l, err := s.orch(ctx).LockTarget(step, id)
	if err != nil {
		return nil, nil, &report.StepError{Op: step, ID: id, Step: orchestrate.StepLock, Err: err,
			Remedy: "wait for the running checkpoint or restore of this container to finish"}
	}
	s.busy[id] = l
	return l, func() {
		l.Release()
		s.mu.Lock()
		delete(s.busy, id)
		s.mu.Unlock()
	}, nil
}

// busyFor is the error for a request that must not run while a checkpoint
// or restore of the task is in flight; nil if none is.
func (s *service) busyFor(id, step string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.busy[id]; ok {
		return busyError(id, step, held.Op())
	}
	return nil
}

func busyError(id, step, op string) error {
	return &report.StepError{Op: step, ID: id, Step: orchestrate.StepLock,
		Err:    &lock.BusyError{Target: "container " + id, Holder: op + " of container " + id, PID: os.Getpid()},
		Remedy: "wait for the running " + op + " of this container to finish, then retry"}
}

// Pause refuses to freeze a task that a checkpoint or restore is working
// on. containerd pauses a task before every checkpoint request: a second
// `ctr task checkpoint` would freeze the cgroup under the first run's
// driver calls, which hang on frozen threads, before the shim could refuse
// its Checkpoint. The first run's own thaw and re-pause go to the runc
// service directly. Otherwise the pause is GPU-free (pause.go).
func (s *service) Pause(ctx context.Context, r *taskv3.PauseRequest) (*emptypb.Empty, error) {
	if err := s.stoppingErr(r.ID, "pause"); err != nil {
		return nil, toGRPC(err, false)
	}
	if err := s.busyFor(r.ID, "pause"); err != nil {
		return nil, toGRPC(err, false)
	}
	return s.pause(ctx, r)
}

// pendingRestore is a restore checked at Create, run at Start.
type pendingRestore struct {
	m      *manifest.Manifest
	scope  orchestrate.GPUScope // the GPUs the new spec gives the container
	tcp    bool                 // tcp-established was added to the bundle's CRIU configuration for this restore
	bundle string
	work   *imagerestore.Prepared // the checkpoint image unpacked for this restore; nil for containerd's checkpoints
	// deadline is a restore from an image's, begun at Create (deadline.go);
	// zero for containerd's checkpoints.
	deadline orchestrate.Deadline
	// ctrdCopy is the directory containerd unpacked its checkpoint blob
	// into, removed after the restore (see containerdCopy); "" otherwise.
	ctrdCopy string
	armed    outcome.Armed     // the outcome check, in the bundle's CRIU configuration for this restore
	post     *orchestrate.Hook // the container's post-restore hook, nil without one
	stdio    []string          // the task's stdout and stderr, as Create named them (restorestdio.go)
}

func (s *service) setRestore(id string, r pendingRestore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restores[id] = r
}

// takeRestore returns and forgets the restore recorded at Create.
func (s *service) takeRestore(id string) (pendingRestore, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.restores[id]
	delete(s.restores, id)
	return r, ok
}

// Delete forgets a restore that was created but never started, and
// removes its image's work directory, and the record of a GPU-free pause
// that the task did not live to resume. The record goes only once the
// runc service has deleted the task: it refuses a paused one, whose
// resume still needs the record to bring CUDA back. A Delete during the
// restore's Start ends the restore and the task first (restorerun.go): the
// runc service then answers with the exit status of the killed tree.
func (s *service) Delete(ctx context.Context, r *taskv3.DeleteRequest) (*taskv3.DeleteResponse, error) {
	if run := s.inFlight(r.ID); run != nil && r.ExecID == "" && s.noteEnd(ctx, run, "delete") {
		if err := s.awaitStart(ctx, run, "delete"); err != nil {
			return nil, toGRPC(err, false)
		}
		if run.endErr != nil {
			return nil, toGRPC(s.endedError(run, "delete", "delete"), false)
		}
	}
	if r.ExecID == "" {
		if pending, ok := s.takeRestore(r.ID); ok {
			removeWork(ctx, r.ID, pending.work)
		}
	}
	resp, err := s.TTRPCTaskService.Delete(ctx, r)
	if err == nil && r.ExecID == "" {
		s.orch(ctx).ForgetPause(r.ID)
	}
	return resp, err
}

// shimDriverOptions are the driver's options in the shim (see
// cuda.Options.DieWithCaller).
func shimDriverOptions(c config.Config) cuda.Options {
	o := orchestrate.DriverOptions(c)
	o.DieWithCaller = true
	return o
}
