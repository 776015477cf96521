package agent

import (
	"context"
	"time"

	cryov1 "github.com/cryo-gpu/cryo/api/v1alpha1"
	"github.com/cryo-gpu/cryo/internal/progress"
)

// sampleEvery is how often the agent writes the bytes of a build or push
// into the status: often enough for `kubectl cryo checkpoint --wait` to
// move, rarely enough to cost the API server nothing.
const sampleEvery = time.Second

// span is the part of Progress one step covers: the kubelet's checkpoint
// reports nothing until it returns, the build and the push count bytes.
type span struct {
	phase  cryov1.Phase
	lo, hi int32
}

var (
	buildSpan = span{cryov1.PhaseCheckpointing, 40, 70}
	pushSpan  = span{cryov1.PhasePushing, 70, 99} // 100 is Succeeded's
)

// percent is how far into the span done of total bytes are.
func (p span) percent(done, total int64) int32 {
	if total <= 0 {
		return p.lo
	}
	done = min(max(done, 0), total)
	return p.lo + int32(int64(p.hi-p.lo)*done/total)
}

// largest is the running task with the most bytes: the build's
// compression beside its verification (of unknown size), or the push.
func largest(tasks []progress.Snapshot) (progress.Snapshot, bool) {
	var best progress.Snapshot
	for _, t := range tasks {
		if t.Total > best.Total {
			best = t
		}
	}
	return best, best.Total > 0
}

// follow writes the bytes of r's tasks into the status every sampleEvery
// until the returned stop is called; stop waits for the last write, so
// that no write of this step lands after the next step's.
func (s *statusWriter) follow(ctx context.Context, r *progress.Renderer, p span) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		var last progress.Snapshot
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			snap, ok := largest(r.Running())
			if !ok || snap == last {
				continue
			}
			last = snap
			// A failed write (the Checkpoint ended meanwhile) is the
			// step's to find out; the count is only a progress report.
			_ = s.update(ctx, func(st *cryov1.CheckpointStatus) {
				st.Phase, st.BytesDone, st.BytesTotal = p.phase, snap.Done, snap.Total
				st.Progress = p.percent(snap.Done, snap.Total)
			})
		}
	}()
	return func() { close(quit); <-done }
}
