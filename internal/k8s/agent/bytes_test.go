package agent

import (
	"io"
	"testing"

	"github.com/cryo-gpu/cryo/internal/progress"
)

// Progress moves with the bytes inside each step's span, and the push
// never reports 100 before Succeeded does.
func TestSpanPercent(t *testing.T) {
	for _, c := range []struct {
		p           span
		done, total int64
		want        int32
	}{
		{buildSpan, 0, 0, 40}, {buildSpan, 0, 100, 40}, {buildSpan, 50, 100, 55}, {buildSpan, 100, 100, 70},
		{buildSpan, 150, 100, 70}, {pushSpan, 1 << 30, 4 << 30, 77}, {pushSpan, 4 << 30, 4 << 30, 99},
	} {
		if got := c.p.percent(c.done, c.total); got != c.want {
			t.Errorf("%v: %d of %d: %d%%, want %d%%", c.p, c.done, c.total, got, c.want)
		}
	}
}

// The count followed is the task with bytes: a build verifies (of
// unknown size) beside its compression.
func TestLargestTask(t *testing.T) {
	r := progress.New(io.Discard, false)
	if _, ok := largest(r.Running()); ok {
		t.Error("a count with no task")
	}
	verify := r.Start("verifying", 0)
	defer verify.Done()
	if _, ok := largest(r.Running()); ok {
		t.Error("a count of a task of unknown size")
	}
	build := r.Start("build", 1000)
	defer build.Done()
	build.Add(300)
	if got, ok := largest(r.Running()); !ok || got.Name != "build" || got.Done != 300 || got.Total != 1000 {
		t.Errorf("largest %+v %v", got, ok)
	}
}
