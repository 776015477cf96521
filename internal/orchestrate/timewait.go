package orchestrate

import (
	"context"
	"time"

	"github.com/cryo-gpu/cryo/internal/fixup"
)

// waitTimeWait waits, up to a minute, until no TIME_WAIT socket of this
// network namespace holds a listening port of the checkpoint in dir: the
// ports step (portsStep) as a sequence of its own, for a bare restore,
// which binds in this namespace after its check.
func (o *Orchestrator) waitTimeWait(ctx context.Context, id, dir string) {
	seq := &runner{o: o, op: "restore", id: id, steps: []step{o.portsStep(id, dir)},
		failed: func(_ context.Context, _ StepName, err error, _ string) error { return err }}
	_ = seq.run(ctx) // the step does not fail: CRIU says which socket it cannot bind
}

// portsStep waits for the checkpoint's listening ports to be free of
// TIME_WAIT sockets. It is a step only when there is something to wait
// for, and never fails the restore: if a port is still held at the end,
// or the wait is cut off, CRIU says which socket it cannot bind.
func (o *Orchestrator) portsStep(id, dir string) step {
	var ports map[uint32]bool
	var held []uint32
	return step{name: StepPorts,
		skip: func() bool {
			var err error
			if ports, err = fixup.ListeningPorts(dir); err != nil || len(ports) == 0 {
				return true // CRIU reads the images again and reports what is wrong
			}
			var left time.Duration
			if held, left = fixup.TimeWaitOn(ports); len(held) == 0 {
				return true
			}
			o.log().Warn("the checkpoint's listening ports are held by connections closed in the last minute (TIME_WAIT), which no new listener may bind: waiting for them to expire (a restore into a network namespace of its own does not wait)",
				"id", id, "ports", held, "longest", left.Round(time.Second))
			return false
		},
		do: func(ctx context.Context) error {
			deadline := time.Now().Add(fixup.TimeWaitMax)
			for len(held) > 0 && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
					return nil // cut off: the restore that follows stops on ctx itself
				case <-time.After(250 * time.Millisecond):
				}
				held, _ = fixup.TimeWaitOn(ports)
			}
			return nil
		}}
}
