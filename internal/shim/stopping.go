package shim

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/report"
)

// Why a signalled shim finishes its checkpoint first. containerd's shim
// library stops the shim on SIGTERM or SIGINT (an admin's `kill -TERM
// -PGID`, systemd stopping containerd's unit with KillMode=control-group),
// and containerd ends every task of a shim that is gone: it runs the
// shim's `delete`, which kills their processes. A shim that stopped
// mid-checkpoint would lose the workload twice over: the task killed, the
// checkpoint abandoned. So a stopping shim holds its shutdown until the
// checkpoints and restores in flight have ended, each as it would have
// without the signal, and answers containerd first: the checkpoint it was
// asked for is complete (containerd stores it) before the task goes.
// SIGHUP, which would kill a Go program by default, is ignored: the shim
// has no terminal to lose.

// errStopping refuses what a stopping shim no longer starts.
var errStopping = report.Sentinel("the shim is stopping", errdefs.ErrUnavailable)

// drainingShutdown is the shim library's shutdown service, whose callbacks
// (the runc service's: close its event channel, remove the socket, close
// the console platform) wait for the service's runs in flight: until they
// have run the shim keeps serving, and its process does not exit.
type drainingShutdown struct {
	shutdown.Service
	once  sync.Once
	drain func() // set once the service exists; runs once
}

func (d *drainingShutdown) RegisterCallback(fn func(context.Context) error) {
	d.Service.RegisterCallback(func(ctx context.Context) error {
		d.once.Do(func() {
			if d.drain != nil {
				d.drain()
			}
		})
		return fn(ctx)
	})
}

// watchSignals notes the signal that stops the shim (the shim library acts
// on it too) and ignores SIGHUP. Notify, not Ignore: an ignored signal
// would stay ignored in runc and the container's processes.
func (s *service) watchSignals(ctx context.Context) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for sig := range ch {
			name := unix.SignalName(sig.(syscall.Signal))
			if sig == syscall.SIGHUP {
				log.G(ctx).WithField("signal", name).Info("cryo: SIGHUP ignored: the shim has no terminal, and its tasks run on")
				continue
			}
			s.markStopping(ctx, name)
		}
	}()
}

// markStopping refuses new runs from now on and says which runs the shim
// waits for before it stops.
func (s *service) markStopping(ctx context.Context, sig string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping != "" {
		return
	}
	s.stopping = sig
	for id, held := range s.busy {
		log.G(ctx).WithFields(log.Fields{"id": id, "signal": sig, "op": held.Op()}).
			Warn("cryo: stopping once the checkpoint in flight has finished: containerd then ends the task, as it ends every task of a stopped shim; the checkpoint is kept")
	}
}

// stoppingErr refuses a request of a stopping shim; nil while it serves.
func (s *service) stoppingErr(id, op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stoppingLocked(id, op)
}

// stoppingLocked is stoppingErr with s.mu held.
func (s *service) stoppingLocked(id, op string) error {
	if s.stopping == "" {
		return nil
	}
	return &report.StepError{Op: op, ID: id, Step: "begin", Err: errStopping,
		Outcome: "nothing was done: the shim stops on " + s.stopping + ", and containerd then ends its tasks",
		Remedy:  "start the container again once containerd runs its shim again"}
}

// answerGrace is how long a stopping shim serves on after its last run
// ended: a run's answer is written to containerd after its handler has
// returned, and the shim library exits as soon as the shutdown callbacks
// have run, which would cut the answer off (ctr: "ttrpc: closed").
const answerGrace = time.Second

// drain waits until no checkpoint or restore is in flight: the runs end
// as they would have without the signal (a checkpoint's own deadlines
// bound its steps).
func (s *service) drain(ctx context.Context) {
	for waited := false; ; time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		// A restore's Start ends after its run: it may still kill what
		// the restore brought back (restorerun.go).
		n := len(s.busy) + len(s.starts)
		s.mu.Unlock()
		if n == 0 {
			if waited {
				time.Sleep(answerGrace)
				log.G(ctx).Warn("cryo: the runs in flight have ended and been answered: the shim stops, and containerd ends the tasks it served")
			}
			return
		}
		waited = true
	}
}
