// Package progress reports long steps (a CRIU dump, hashing, compressing,
// a push or pull, the driver's GPU copies) as a user expects them: on a
// terminal, one line per step redrawn in place at most ten times a second
// with bytes done and total, rate and ETA; off a terminal (a pipe, a log, a
// CI job), plain lines: a start line, a line every few seconds at most, and
// the end line. Every step ends in a final line that says "done" with its
// total, time and average rate, or "failed", "interrupted" or "skipped":
// never "done" after a failure.
//
// A nil *Renderer (quiet mode) and the nil *Task it starts do nothing, so
// callers need no checks.
package progress

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Timing of the output. The terminal is redrawn at most every
// redrawInterval; plain output prints a progress line when plainEvery has
// passed since the task's last line, or when it crossed another plainStep
// of its total and at least plainMin has passed.
const (
	redrawInterval = 100 * time.Millisecond
	plainEvery     = 10 * time.Second
	plainMin       = 2 * time.Second
	plainStep      = 10 // percent
)

// Renderer draws the tasks that run at once. It is safe for concurrent use.
type Renderer struct {
	w        io.Writer
	terminal bool
	width    func() int // the terminal's columns; 0: do not truncate
	now      func() time.Time

	mu     sync.Mutex
	tasks  []*Task // running, in start order
	drawn  bool    // the terminal line holds a drawing to erase
	ticker chan struct{}
}

// New returns a renderer writing to w. terminal selects the in-place line
// (carriage return and erase-line); otherwise plain lines are written.
func New(w io.Writer, terminal bool) *Renderer {
	return &Renderer{w: w, terminal: terminal, width: func() int { return 0 }, now: time.Now}
}

// IsTerminal says whether f is a terminal.
func IsTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

// ForFile returns a renderer on f, drawing in place when f is a terminal
// (truncated to its width, so that a line never wraps and breaks the
// redraw), or nil when quiet.
func ForFile(f *os.File, quiet bool) *Renderer {
	if quiet {
		return nil
	}
	r := New(f, IsTerminal(f))
	if r.terminal {
		r.width = func() int {
			w, _, err := term.GetSize(int(f.Fd()))
			if err != nil {
				return 0
			}
			return w
		}
	}
	return r
}

// ForStderr is ForFile(os.Stderr, quiet): what the cryo CLI uses.
func ForStderr(quiet bool) *Renderer { return ForFile(os.Stderr, quiet) }

// Terminal says whether r draws in place.
func (r *Renderer) Terminal() bool { return r != nil && r.terminal }

// Start begins a task named name (e.g. "push registry/ns/app:1") of total
// bytes; total 0 is unknown, and SetTotal may give it later.
func (r *Renderer) Start(name string, total int64) *Task {
	if r == nil {
		return nil
	}
	t := &Task{r: r, name: name, start: r.now()}
	t.total.Store(total)
	t.lastLine = t.start
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tasks = append(r.tasks, t)
	if r.terminal {
		r.redraw()
	}
	// Off a terminal the start line waits for the first tick, when the
	// caller has had time to give the total it learns after the start.
	r.startTicker()
	return t
}

// StartOpaque begins a task whose bytes are known but whose progress is
// not: a driver copy of total bytes that reports nothing until it returns.
// Its line shows the total and the time elapsed, and an ETA only once
// SetRate gave a rate measured elsewhere; it never shows bytes done.
func (r *Renderer) StartOpaque(name string, total int64) *Task {
	t := r.Start(name, total)
	if t != nil {
		t.opaque.Store(true)
	}
	return t
}

// Println prints a line of its own (a blob skipped, an attempt retried)
// above the running tasks.
func (r *Renderer) Println(s string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.terminal {
		r.announce() // a task's lines follow its start line
	}
	r.line(s)
}

// announce writes the start lines still owed. r.mu is held.
func (r *Renderer) announce() {
	for _, t := range r.tasks {
		if !t.announced {
			t.announced = true
			r.line(t.startLine())
		}
	}
}

// Close ends every task still running as interrupted and stops redrawing:
// for a front end that is exiting on a signal.
func (r *Renderer) Close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	tasks := append([]*Task(nil), r.tasks...)
	r.mu.Unlock()
	for _, t := range tasks {
		t.End(context.Canceled)
	}
}

// line writes s as a finished line: on a terminal it erases the drawing,
// writes s and draws the running tasks again below it. r.mu is held.
func (r *Renderer) line(s string) {
	if !r.terminal {
		io.WriteString(r.w, s+"\n")
		return
	}
	io.WriteString(r.w, "\r\x1b[K"+s+"\n")
	r.drawn = false
	r.redraw()
}

// redraw draws the running tasks on the one terminal line, joined by " | ".
// r.mu is held.
func (r *Renderer) redraw() {
	if len(r.tasks) == 0 {
		if r.drawn {
			io.WriteString(r.w, "\r\x1b[K")
			r.drawn = false
		}
		return
	}
	now := r.now()
	parts := make([]string, len(r.tasks))
	for i, t := range r.tasks {
		parts[i] = t.status(now)
	}
	io.WriteString(r.w, "\r\x1b[K"+truncate(strings.Join(parts, " | "), r.width()))
	r.drawn = true
}

// refresh is one tick: a redraw on a terminal, due progress lines off it.
func (r *Renderer) refresh() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for _, t := range r.tasks {
		t.sample(now)
	}
	if r.terminal {
		r.redraw()
		return
	}
	for _, t := range r.tasks {
		switch {
		case !t.announced:
			t.announced = true
			r.line(t.startLine())
		case t.plainDue(now):
			r.line(t.status(now))
		}
	}
}

// startTicker refreshes while tasks run, so that the elapsed time and the
// rate move even while no bytes arrive. r.mu is held.
func (r *Renderer) startTicker() {
	if r.ticker != nil {
		return
	}
	stop := make(chan struct{})
	r.ticker = stop
	go func() {
		t := time.NewTicker(redrawInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				r.refresh()
			}
		}
	}()
}

// remove takes t off the running tasks and writes its final line. r.mu is
// held.
func (r *Renderer) remove(t *Task, final string) {
	for i, x := range r.tasks {
		if x == t {
			r.tasks = append(r.tasks[:i], r.tasks[i+1:]...)
			break
		}
	}
	r.line(final)
	if len(r.tasks) == 0 && r.ticker != nil {
		close(r.ticker)
		r.ticker = nil
	}
}

// truncate cuts s to width columns (runes; cryo's lines have no wide
// characters), keeping room for the cursor.
func truncate(s string, width int) string {
	if width <= 1 {
		return s
	}
	rs := []rune(s)
	if len(rs) < width {
		return s
	}
	return string(rs[:width-2]) + "…"
}

// Outcome is how a task ended, for its final line.
func outcome(err error) string {
	switch {
	case err == nil:
		return "done"
	case errors.Is(err, context.Canceled):
		return "interrupted"
	default:
		return "failed"
	}
}

// Snapshot is a running task's count, for a caller that reports it
// somewhere other than a terminal (an API object's status).
type Snapshot struct {
	Name        string
	Done, Total int64
}

// Running is the tasks still running, in start order.
func (r *Renderer) Running() []Snapshot {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Snapshot, 0, len(r.tasks))
	for _, t := range r.tasks {
		out = append(out, Snapshot{Name: t.name, Done: t.done.Load(), Total: t.total.Load()})
	}
	return out
}
