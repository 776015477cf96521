package progress

import (
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"
)

// rateWindow is the time constant of the rate's smoothing: long enough that
// the ETA does not jump with every burst, short enough to follow a real
// change of speed (a registry that slows down).
const rateWindow = 3 * time.Second

// sampleEvery is the shortest interval the rate is measured over.
const sampleEvery = 250 * time.Millisecond

// Task is one long step. Add, Set and Write may be called from any
// goroutine at any rate: they only count, drawing is the renderer's tick.
type Task struct {
	r     *Renderer
	name  string
	start time.Time

	done     atomic.Int64
	total    atomic.Int64
	opaque   atomic.Bool // bytes known, progress not (a driver copy)
	estimate atomic.Bool // the total is an estimate: done may pass it

	// Guarded by r.mu.
	ended      bool
	announced  bool // plain output: the start line is written
	sampled    time.Time
	sampleDone int64
	rate       float64 // smoothed bytes/s; 0: not measured yet
	given      float64 // bytes/s measured elsewhere, for an opaque task's ETA
	lastLine   time.Time
	lastStep   int64
}

// Add counts n more bytes done.
func (t *Task) Add(n int64) {
	if t != nil {
		t.done.Add(n)
	}
}

// Set sets the bytes done (for a watcher that sees a size, not a delta).
func (t *Task) Set(n int64) {
	if t != nil {
		t.done.Store(n)
	}
}

// SetTotal sets the total bytes, once known.
func (t *Task) SetTotal(n int64) {
	if t != nil {
		t.total.Store(n)
	}
}

// SetEstimate sets a total that is only an estimate (shown with "~"); the
// bytes done may pass it, and the line then counts them as the total.
func (t *Task) SetEstimate(n int64) {
	if t != nil {
		t.estimate.Store(true)
		t.total.Store(n)
	}
}

// SetRate gives an opaque task the rate of a comparable copy measured
// before (bytes/s), from which its line shows an ETA.
func (t *Task) SetRate(bytesPerSec float64) {
	if t == nil {
		return
	}
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	t.given = bytesPerSec
}

// Write counts len(p) bytes: a Task is an io.Writer for io.TeeReader and
// io.MultiWriter.
func (t *Task) Write(p []byte) (int, error) {
	t.Add(int64(len(p)))
	return len(p), nil
}

// Reader counts the bytes read through rd.
func (t *Task) Reader(rd io.Reader) io.Reader {
	if t == nil {
		return rd
	}
	return io.TeeReader(rd, t)
}

// Done ends the task as done. Calls after the first end are ignored.
func (t *Task) Done() { t.End(nil) }

// Fail ends the task as failed, or as interrupted when err is (or wraps)
// context.Canceled.
func (t *Task) Fail(err error) {
	if err == nil {
		err = errFailed
	}
	t.End(err)
}

var errFailed = fmt.Errorf("failed")

// End ends the task as done when err is nil, else as Fail does.
func (t *Task) End(err error) {
	if t == nil {
		return
	}
	t.finish(t.final(err))
}

// Skip ends the task as skipped, saying why ("already exists").
func (t *Task) Skip(reason string) {
	if t == nil {
		return
	}
	t.finish(t.name + " skipped: " + reason)
}

// Elapsed is the time since the task started.
func (t *Task) Elapsed() time.Duration {
	if t == nil {
		return 0
	}
	return t.r.now().Sub(t.start)
}

func (t *Task) finish(line string) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	if t.ended {
		return
	}
	t.ended = true
	if !t.r.terminal && !t.announced {
		t.announced = true
		t.r.line(t.startLine())
	}
	t.r.remove(t, line)
}

// final is the task's end line.
func (t *Task) final(err error) string {
	el := t.Elapsed()
	done, total := t.done.Load(), t.total.Load()
	if t.opaque.Load() {
		done = total // an opaque task moves its bytes all at once
	}
	what := outcome(err)
	if err != nil {
		s := fmt.Sprintf("%s %s after %s", t.name, what, Duration(el))
		switch {
		case t.opaque.Load() || done == 0 && total == 0:
		case total > 0 && !t.estimate.Load():
			s += fmt.Sprintf(" (%s of %s)", Human(done), Human(total))
		default:
			s += fmt.Sprintf(" (%s)", Human(done))
		}
		return s
	}
	if done == 0 {
		return fmt.Sprintf("%s done in %s", t.name, Duration(el))
	}
	return fmt.Sprintf("%s done in %s (%s, %s)", t.name, Duration(el), Human(done), Rate(float64(done)/math.Max(el.Seconds(), 1e-3)))
}

// startLine is the plain output's first line.
func (t *Task) startLine() string {
	if total := t.total.Load(); total > 0 {
		return fmt.Sprintf("%s… %s%s", t.name, t.approx(), Human(total))
	}
	return t.name + "…"
}

func (t *Task) approx() string {
	if t.estimate.Load() {
		return "~"
	}
	return ""
}

// sample updates the smoothed rate. r.mu is held.
func (t *Task) sample(now time.Time) {
	if t.sampled.IsZero() {
		t.sampled = t.start
	}
	dt := now.Sub(t.sampled)
	if dt < sampleEvery {
		return
	}
	done := t.done.Load()
	inst := float64(done-t.sampleDone) / dt.Seconds()
	if t.rate == 0 {
		t.rate = inst
	} else {
		alpha := 1 - math.Exp(-dt.Seconds()/rateWindow.Seconds())
		t.rate += alpha * (inst - t.rate)
	}
	t.sampled, t.sampleDone = now, done
}

// currentRate is the smoothed rate, or the average until one is measured.
func (t *Task) currentRate(now time.Time) float64 {
	if t.rate > 0 {
		return t.rate
	}
	if el := now.Sub(t.start).Seconds(); el > 0 {
		return float64(t.done.Load()) / el
	}
	return 0
}

// status is the task's running line. r.mu is held.
func (t *Task) status(now time.Time) string {
	el := now.Sub(t.start)
	total := t.total.Load()
	if t.opaque.Load() {
		return t.opaqueStatus(el, total)
	}
	done := t.done.Load()
	rate := t.currentRate(now)
	if total <= 0 {
		return fmt.Sprintf("%s  %s  %s  %s", t.name, Human(done), Rate(rate), Duration(el))
	}
	if done > total {
		total = done // an estimate that fell short
	}
	s := fmt.Sprintf("%s  %s / %s%s (%d%%)  %s", t.name, Human(done), t.approx(), Human(total), done*100/total, Rate(rate))
	if rate > 0 && done < total {
		s += "  ETA " + Duration(time.Duration(float64(total-done)/rate*float64(time.Second)))
	}
	return s
}

func (t *Task) opaqueStatus(el time.Duration, total int64) string {
	s := fmt.Sprintf("%s  %s  %s", t.name, Human(total), Duration(el))
	if total <= 0 {
		s = fmt.Sprintf("%s  %s", t.name, Duration(el))
	}
	if t.given > 0 && total > 0 {
		if left := time.Duration(float64(total)/t.given*float64(time.Second)) - el; left > 0 {
			s += "  ETA ~" + Duration(left)
		}
	}
	return s
}

// plainDue says whether plain output owes t a progress line, and if so
// records it. r.mu is held.
func (t *Task) plainDue(now time.Time) bool {
	since := now.Sub(t.lastLine)
	step := int64(0)
	if total := t.total.Load(); total > 0 && !t.opaque.Load() {
		step = min(t.done.Load()*100/total, 100) / plainStep
	}
	if since < plainEvery && (step <= t.lastStep || since < plainMin) {
		return false
	}
	t.lastLine, t.lastStep = now, step
	return true
}
