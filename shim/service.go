package shim

import (
	"context"
	"os"
	"sync"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"

	"github.com/cryo-gpu/cryo/cudacr"
	cryort "github.com/cryo-gpu/cryo/runtime"
	"github.com/cryo-gpu/cryo/snapshot"
)

// service is containerd's runc task service with cryo's orchestration on
// Checkpoint, and on Create and Start of a restored task. Every other call
// goes to the runc service unchanged.
type service struct {
	taskv3.TTRPCTaskService // the runc task service

	driver    *cudacr.Driver
	publisher shim.Publisher
	daemon    *legacyDaemon // containerd itself, for the 1.x spec remedy

	mu       sync.Mutex
	restores map[string]pendingRestore // task id -> checked restore, between Create and Start
	busy     map[string]bool           // task ids with a checkpoint or restore in flight
}

var _ shim.TTRPCService = (*service)(nil)

func newService(inner taskv3.TTRPCTaskService, publisher shim.Publisher, grpcAddress string) *service {
	return &service{
		TTRPCTaskService: inner,
		// The driver runs every CUDA call in a child process with a
		// deadline; the shim itself never calls the driver.
		driver:    cudacr.New(cudacr.Options{}),
		publisher: publisher,
		daemon:    newLegacyDaemon(grpcAddress),
		restores:  map[string]pendingRestore{},
		busy:      map[string]bool{},
	}
}

// orch is the orchestration for one request: its step events become
// containerd log entries with the step's duration as a field.
func (s *service) orch(ctx context.Context) *cryort.Orchestrator {
	return cryort.New(
		cryort.WithDriver(s.driver),
		cryort.WithLogger(cryort.DiscardLogger()),
		cryort.WithEvents(func(e cryort.Event) { logStep(ctx, e) }),
		cryort.WithAllowCUDAIPC(os.Getenv(cryort.AllowCUDAIPCEnv) == "1"),
		cryort.WithTCPHint("set open_tcp in the runc checkpoint options (CheckpointOptions.OpenTcp through containerd's Go client; `ctr` has no flag for it)"),
	)
}

func logStep(ctx context.Context, e cryort.Event) {
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

// begin marks a task busy with a checkpoint or restore; a second one for
// the same task fails at once rather than interleave with the first.
func (s *service) begin(id, step string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[id] {
		return nil, &StepError{Container: id, Step: step, Err: ErrBusy,
			Remedy: "wait for the running checkpoint or restore of this container to finish"}
	}
	s.busy[id] = true
	return func() {
		s.mu.Lock()
		delete(s.busy, id)
		s.mu.Unlock()
	}, nil
}

// pendingRestore is a restore checked at Create, run at Start.
type pendingRestore struct {
	m      *snapshot.Manifest
	scope  cryort.GPUScope // the GPUs the new spec gives the container
	tcp    bool            // tcp-established was added to the bundle's CRIU configuration for this restore
	bundle string
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

// Delete forgets a restore that was created but never started.
func (s *service) Delete(ctx context.Context, r *taskv3.DeleteRequest) (*taskv3.DeleteResponse, error) {
	if r.ExecID == "" {
		s.takeRestore(r.ID)
	}
	return s.TTRPCTaskService.Delete(ctx, r)
}
