package shim

import (
	"context"
	"errors"
	"time"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/log"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/imagerestore"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Create checks a checkpoint against this host before anything else
// happens: a checkpoint that needs a GPU this host lacks fails here, with
// the reason, instead of half-way through runc restore. containerd's Create
// only records the checkpoint; runc restore runs in Start. A container
// whose spec names a checkpoint image (imagerestore.AnnImage) and that
// containerd gives no checkpoint is restored from that image (image.go).
func (s *service) Create(ctx context.Context, r *taskv3.CreateTaskRequest) (*taskv3.CreateTaskResponse, error) {
	if err := upgradeCreateOptions(ctx, r); err != nil {
		return nil, toGRPC(&report.StepError{Op: "create", ID: r.ID, Step: "read task options", Err: err,
			Remedy: "pass runc.v2's task options (containerd.runc.v1.Options)"}, false)
	}
	runcOptionsOnly(ctx, r)
	systemdCgroupFromSpec(ctx, r)
	restoreFromImagePath(ctx, r)
	if r.Checkpoint == "" {
		if req, ok, err := imageRequest(r.Bundle); ok || err != nil {
			return s.runCreate(ctx, r.ID, func(ctx context.Context) (*taskv3.CreateTaskResponse, error) {
				return s.createFromImage(ctx, r, req, err)
			})
		}
		if ri, ok := s.runnableCheckpoint(ctx, r); ok {
			return s.runCreate(ctx, r.ID, func(ctx context.Context) (*taskv3.CreateTaskResponse, error) {
				return s.createFromRunnable(ctx, r, ri)
			})
		}
		return s.createFresh(ctx, r)
	}
	return s.runCreate(ctx, r.ID, func(ctx context.Context) (*taskv3.CreateTaskResponse, error) {
		return s.createFromCheckpoint(ctx, r)
	})
}

// createFromCheckpoint restores the task from the checkpoint directory
// the request names (containerd's, or the user's own path).
func (s *service) createFromCheckpoint(ctx context.Context, r *taskv3.CreateTaskRequest) (*taskv3.CreateTaskResponse, error) {
	started := time.Now()
	rctx, cancel, err := s.withCheckpointDeadline(ctx, r)
	defer cancel()
	var pending pendingRestore
	if err == nil {
		pending, err = s.checkRestore(rctx, r)
	}
	if err != nil {
		removeContainerdCopy(ctx, r.ID, containerdCopy(r))
		log.G(ctx).WithError(err).Error("cryo: restore refused")
		return nil, toGRPC(err, true)
	}
	pending.deadline, _ = orchestrate.RestoreDeadline(rctx)
	pending.ctrdCopy = containerdCopy(r)
	return s.createChecked(ctx, r, pending, started, nil)
}

// createFresh creates a task that starts from its image.
func (s *service) createFresh(ctx context.Context, r *taskv3.CreateTaskRequest) (*taskv3.CreateTaskResponse, error) {
	resp, err := s.TTRPCTaskService.Create(ctx, r)
	if err == nil {
		s.daemon.renewSpec(ctx, r.ID)
	}
	return resp, err
}

// checkRestore is everything a restore checks before the runc service
// creates the task: the new spec's GPUs, the checkpoint against them and
// this host, and whether CRIU needs tcp-established.
func (s *service) checkRestore(ctx context.Context, r *taskv3.CreateTaskRequest) (pendingRestore, error) {
	scope, err := orchestrate.ScopeFromBundle(r.Bundle)
	if err != nil {
		return pendingRestore{}, &report.StepError{Op: "restore", ID: r.ID, Step: "read the new spec", Err: err, Remedy: "check the container's bundle " + r.Bundle}
	}
	m, err := s.orchWith(ctx, s.stepNoter(ctx)).CheckRestore(ctx, r.ID, r.Checkpoint, scope)
	if err != nil {
		return pendingRestore{}, labelContainer(err, r)
	}
	tcp, err := restoreTCP(ctx, r)
	if err != nil {
		return pendingRestore{}, err
	}
	_, post, err := s.hooksOf(r.ID, r.Bundle, "restore")
	if err != nil {
		return pendingRestore{}, err
	}
	armed, err := armOutcome(r.ID, r.Bundle)
	if err != nil {
		return pendingRestore{}, err
	}
	return pendingRestore{m: m, scope: scope, tcp: tcp, bundle: r.Bundle, armed: armed, post: post}, nil
}

// restoreCreated records a checked restore for Start, once the runc
// service has created its task; a Create given up meanwhile is undone
// instead (commitCreate), and the error says so.
func (s *service) restoreCreated(ctx context.Context, r *taskv3.CreateTaskRequest, pending pendingRestore, started time.Time) error {
	pending.stdio = []string{r.Stdout, r.Stderr}
	if err := s.commitCreate(ctx, r, pending); err != nil {
		return err
	}
	s.daemon.renewSpec(context.WithoutCancel(ctx), r.ID)
	log.G(ctx).WithFields(log.Fields{
		"id": r.ID, "checkpoint": r.Checkpoint, "check_ms": time.Since(started).Milliseconds(),
	}).Info("cryo: restore checked")
	return nil
}

// Start of a restored task: runc restore runs inside the runc service's
// Start; CUDA is resumed after it. If CUDA cannot be resumed, the task is
// killed: a process whose GPU state stays checkpointed would hang. runc
// restore runs with the restore's deadline (CRYO_RESTORE_TIMEOUT): the
// runc service kills runc when its context ends, and a restore that failed
// so, or because CRIU crashed, is removed (restorefail.go) before Start
// returns, so that the task can be deleted and nothing of it stays. A
// Delete, Kill or Shutdown of the task meanwhile is noted, and done once
// the restore has ended (restorerun.go).
func (s *service) Start(ctx context.Context, r *taskv3.StartRequest) (*taskv3.StartResponse, error) {
	if r.ExecID != "" {
		return s.TTRPCTaskService.Start(ctx, r)
	}
	ctx, run, pending, restoring := s.takeStart(ctx, r.ID)
	if !restoring {
		return s.TTRPCTaskService.Start(ctx, r)
	}
	resp, err := s.restoreStart(ctx, r, run, pending)
	return s.endStart(ctx, run, resp, err)
}

// restoreStart is Start's restore, run.
func (s *service) restoreStart(ctx context.Context, r *taskv3.StartRequest, run *restoreRun, pending pendingRestore) (*taskv3.StartResponse, error) {
	// The image's work directory holds the processes' memory: CRIU has
	// read it once Start returns, whether the restore worked or not.
	defer removeWork(ctx, r.ID, pending.work)
	defer removeContainerdCopy(ctx, r.ID, pending.ctrdCopy)
	if pending.tcp {
		defer endRestoreTCP(ctx, r.ID, pending.bundle)
	}
	defer confineCgroups(ctx, r.ID, pending.bundle)()
	defer disarmOutcome(ctx, r.ID, pending.armed)
	ctx, cancel := startDeadline(ctx, pending)
	defer cancel()
	l, done, err := s.begin(ctx, r.ID, "restore")
	if err != nil {
		return nil, toGRPC(err, false)
	}
	defer done()
	started := time.Now()
	cleanup, removed := s.failedRestoreCleanup(ctx, r.ID, pending)
	var resp *taskv3.StartResponse
	onStep := func(e orchestrate.Event) {
		if !e.Done {
			s.atStep(run, string(e.Step))
		}
	}
	_, err = s.orchWith(ctx, onStep).Restore(ctx, r.ID, pending.m, orchestrate.Restorer{
		Restore: func(ctx context.Context) (int, error) {
			var err error
			defer holdStdio(pending.stdio...)()
			if resp, err = s.TTRPCTaskService.Start(ctx, r); err != nil {
				return 0, outcomeErr(pending.bundle, err)
			}
			outcomeStep(pending.bundle, pending.m)
			return int(resp.Pid), nil
		},
		Target: func(pid int) orchestrate.Target {
			t := s.restoredTarget(r.ID, pid)
			t.Scope, t.InitPID = pending.scope, pid
			return t
		},
		Kill:        func(ctx context.Context) { s.killRestored(ctx, r.ID) },
		Lock:        l,
		Remedy:      outcomeRemedy,
		Cleanup:     cleanup,
		Removed:     removed,
		PostRestore: pending.post,
	})
	if orchestrate.PostHookFailed(err) {
		// The task runs with its GPU state: failing Start would have
		// containerd (and the kubelet) kill the only running copy over
		// an action the user can take again. The error is logged.
		log.G(ctx).WithError(err).WithField("id", r.ID).Error("cryo: restored, but the post-restore hook failed")
		err = nil
	}
	if err != nil {
		log.G(ctx).WithError(err).Error("cryo: restore failed")
		return nil, toGRPC(labelBundle(err, r.ID, pending.bundle), false)
	}
	log.G(ctx).WithFields(log.Fields{
		"id": r.ID, "pid": resp.Pid, "total_ms": time.Since(started).Milliseconds(),
	}).Info("cryo: restore done")
	return resp, nil
}

func (s *service) killRestored(ctx context.Context, id string) {
	_, err := s.TTRPCTaskService.Kill(ctx, &taskv3.KillRequest{ID: id, Signal: uint32(unix.SIGKILL), All: true})
	if err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: could not kill the restored task")
	}
}

// restoreTCP passes tcp-established to CRIU when the checkpoint holds
// established TCP connections (it was taken with open_tcp): CRIU restores
// them only with it, and containerd's runc service never passes it to
// `runc restore`. runc hands CRIU the configuration file the bundle names,
// so the option goes there, for this restore only (see endRestoreTCP).
func restoreTCP(ctx context.Context, r *taskv3.CreateTaskRequest) (bool, error) {
	n, err := criu.EstablishedTCP(r.Checkpoint)
	if err != nil || n == 0 {
		return false, nil // CheckRestore read the directory; CRIU reports the rest
	}
	added, err := criu.AddConfig(r.Bundle, criu.TCPEstablished)
	if err != nil {
		return false, &report.StepError{Op: "restore", ID: r.ID, Step: "pass tcp-established to CRIU", Err: err,
			Remedy: "the checkpoint holds established TCP connections, which CRIU restores only with tcp-established"}
	}
	log.G(ctx).WithFields(log.Fields{"id": r.ID, "connections": n}).
		Info("cryo: checkpoint holds established TCP connections: restoring with tcp-established")
	return len(added) > 0, nil // else the configuration had it already, for good
}

// endRestoreTCP takes tcp-established out of the bundle's CRIU
// configuration again: runc names the file at every later checkpoint of
// the container, which must keep its connections only when asked.
func endRestoreTCP(ctx context.Context, id, bundle string) {
	if err := criu.RemoveConfig(bundle, criu.TCPEstablished); err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: tcp-established stays in the CRIU configuration: later checkpoints keep established TCP connections unasked")
	}
}

// confineCgroups keeps the restored tasks in the cgroups runc makes for
// the new container (criu.ConfineCgroups), for this restore only: the
// returned function takes the line out again. A container with a CRIU
// configuration of its own restores in CRIU's default mode, which the
// pre-restore check covers.
func confineCgroups(ctx context.Context, id, bundle string) func() {
	undo, lines, err := criu.ConfineCgroups(bundle)
	if err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: CRIU moves the restored tasks into the cgroup paths of the checkpoint, rewritten into the container's cgroup (the pre-restore check refused any other)")
	} else if len(lines) > 0 {
		log.G(ctx).WithFields(log.Fields{"id": id, "criu": lines}).Info("cryo: restoring with the tasks kept in the container's cgroups")
	}
	return func() {
		if err := undo(); err != nil {
			log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: " + criu.ManageCgroupsIgnore + " stays in the CRIU configuration")
		}
	}
}

// labelContainer names the container by its Kubernetes name, when the CRI
// gave one, in a refusal that names it by id alone: the kubelet shows the
// message in the pod's events, where the containerd id means little.
func labelContainer(err error, r *taskv3.CreateTaskRequest) error {
	return labelBundle(err, r.ID, r.Bundle)
}

// labelBundle is labelContainer for task id of bundle: a failed restore's
// error reaches the pod's events the same way.
func labelBundle(err error, id, bundle string) error {
	var se *report.StepError
	if !errors.As(err, &se) || se.ID != id {
		return err
	}
	if spec, rerr := readBundleSpec(bundle); rerr == nil {
		se.ID = containerLabel(id, spec.Annotations[imagerestore.AnnCRIContainerName])
	}
	return err
}
