package orchestrate

import (
	"context"
	"time"

	"github.com/cryo-gpu/cryo/internal/fixup"
)

// waitTimeWait waits, up to a minute, until no TIME_WAIT socket of this
// network namespace holds a listening port of the checkpoint in dir. It is
// a step of its own only when there is something to wait for.
func (o *Orchestrator) waitTimeWait(ctx context.Context, id, dir string) {
	ports, err := fixup.ListeningPorts(dir)
	if err != nil || len(ports) == 0 {
		return // CRIU reads the images again and reports what is wrong
	}
	held, left := fixup.TimeWaitOn(ports)
	if len(held) == 0 {
		return
	}
	o.log().Warn("the checkpoint's listening ports are held by connections closed in the last minute (TIME_WAIT), which no new listener may bind: waiting for them to expire (a restore into a network namespace of its own does not wait)",
		"id", id, "ports", held, "longest", left.Round(time.Second))
	o.step(ctx, id, StepPorts, func(ctx context.Context) error {
		deadline := time.Now().Add(fixup.TimeWaitMax)
		for len(held) > 0 && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
			held, _ = fixup.TimeWaitOn(ports)
		}
		return nil // if still held, CRIU says which socket it cannot bind
	})
}
