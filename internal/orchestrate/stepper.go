package orchestrate

import (
	"context"
	"log/slog"
	"time"

	"github.com/cryo-gpu/cryo/internal/progress"
)

// stepper is the runner's side that reaches outside a sequence: the front
// end's events, its progress lines and its log, and the hold points of a
// test build (failpoint).
type stepper struct {
	log      *slog.Logger
	onEvent  func(Event)
	progress *progress.Renderer
	environ  []string // the entry point's environment, where a test build reads its hold
}

// take runs fn as one named step: it emits the start and end events and
// draws its line (fn finds the line in its ctx, taskFrom), or, for a caller
// that takes neither, logs the duration; it returns the
// duration with fn's error. (A front end with events reports the steps its
// own way, and its logger carries the warnings alone.)
func (st stepper) take(ctx context.Context, id string, s StepName, fn func(context.Context) error) (time.Duration, error) {
	st.emit(Event{ID: id, Step: s})
	t := st.startTask(id, s)
	start := time.Now()
	err := fn(withTask(ctx, t))
	d := time.Since(start)
	t.End(endErr(ctx, err))
	st.emit(Event{ID: id, Step: s, Done: true, Elapsed: d, Err: err})
	switch {
	case st.onEvent != nil || st.progress != nil:
	case err != nil:
		st.log.Warn(MsgStepFailed, "id", id, "step", string(s), "elapsed", d, "error", err)
	default:
		st.log.Info("cryo step done", "id", id, "step", string(s), "elapsed", d)
	}
	return d, err
}

func (st stepper) emit(e Event) {
	if st.onEvent != nil {
		st.onEvent(e)
	}
}

// hold is where a test build may stop op before step s (failpoint).
func (st stepper) hold(op string, s StepName) { failpoint(st.environ, op, s) }
