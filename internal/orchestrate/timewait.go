package orchestrate

import (
	"context"
	"log/slog"
	"time"

	"github.com/cryo-gpu/cryo/internal/fixup"
)

// waitTimeWait waits, up to a minute, until no TIME_WAIT socket of this
// network namespace holds a listening port of the checkpoint in dir: the
// ports step (portsWait) as a sequence of its own, for a bare restore,
// which binds in this namespace after its check.
func waitTimeWait(ctx context.Context, e env, id, dir string) {
	w := &portsWait{id: id, dir: dir}
	w.probe(e.log)
	seq := &runner{stepper: e.stepper, op: "restore", id: id, steps: []step{w.step()},
		failed: func(_ context.Context, _ StepName, err error, _ string) error { return err }}
	_ = seq.run(ctx) // the step does not fail: CRIU says which socket it cannot bind
}

// portsWait is the ports step of a restore: the checkpoint's listening
// ports, and those that TIME_WAIT sockets hold, as probed just before the
// step's turn. The step is taken only when something is held, and never
// fails the restore: if a port is still held at the end, or the wait is
// cut off, CRIU says which socket it cannot bind.
type portsWait struct {
	id, dir string
	ports   map[uint32]bool
	held    []uint32
}

// probe reads the checkpoint's listening ports and which of them TIME_WAIT
// sockets hold now, and warns of the wait to come.
func (w *portsWait) probe(log *slog.Logger) {
	var err error
	if w.ports, err = fixup.ListeningPorts(w.dir); err != nil || len(w.ports) == 0 {
		return // CRIU reads the images again and reports what is wrong
	}
	var left time.Duration
	if w.held, left = fixup.TimeWaitOn(w.ports); len(w.held) == 0 {
		return
	}
	log.Warn("the checkpoint's listening ports are held by connections closed in the last minute (TIME_WAIT), which no new listener may bind: waiting for them to expire (a restore into a network namespace of its own does not wait)",
		"id", w.id, "ports", w.held, "longest", left.Round(time.Second))
}

// step waits for the held ports to be free; skipped when none is.
func (w *portsWait) step() step {
	return step{name: StepPorts,
		skip: func() bool { return len(w.held) == 0 },
		do: func(ctx context.Context) error {
			deadline := time.Now().Add(fixup.TimeWaitMax)
			for len(w.held) > 0 && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
					return nil // cut off: the restore that follows stops on ctx itself
				case <-time.After(250 * time.Millisecond):
				}
				w.held, _ = fixup.TimeWaitOn(w.ports)
			}
			return nil
		}}
}
