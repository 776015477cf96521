package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrSequenceState: a sequence was asked to move in a way its states do
// not allow (run twice, or failed after it finished).
var ErrSequenceState = errors.New("step sequence cannot move that way")

// The one step runner of checkpoint, pause and restore. Each sequence is a
// table of steps; the runner walks it forward, one step at a time, and on
// the first failure undoes the completed steps in reverse before the
// sequence turns the failure into its error. A sequence says what to do and
// how to undo it; the order, the interruption, the recording and the
// rollback are the runner's alone, so that no sequence keeps a copy of them.

// step is one entry of a sequence's table.
type step struct {
	name StepName
	do   func(context.Context) error
	// skip, if set, is asked when the step's turn comes: a skipped step
	// neither runs nor counts as completed.
	skip func() bool
	// undo, if set, reverts the completed step after a later one failed.
	undo func(context.Context) undone
	kind stepKind
	// soft: a failure is announced and recorded as the step's, kept in the
	// runner's kept, and the sequence goes on (nothing is undone): for a
	// step whose failure must not cost what the others did.
	soft bool
}

// undone is what one undo left: the outcome it gives the error ("" keeps
// the one before), and whether the walk stops there (the processes are
// gone, or were handed back whole, so earlier steps have nothing left to
// revert).
type undone struct {
	outcome string
	last    bool
	// gaveBack: the undo gave the step's work back (a dumped tree held
	// stopped was continued): the runner no longer counts it done.
	gaveBack bool
}

// stepKind says who announces and times a step.
type stepKind uint8

const (
	// kindTimed: the runner announces, times and records the step. The
	// zero value: a table leaves it out.
	kindTimed stepKind = iota
	// kindInner: the step is a sequence of its own, which front ends also
	// call alone (ResumeRestored): its runner announces, times and records
	// its steps; this one only sequences it.
	kindInner
	// kindSeal: the final write of the manifest, which carries the record
	// of the others: neither announced, timed, recorded nor interrupted.
	kindSeal
)

// seqState is where a sequence stands. It only moves forward: a sequence
// that failed or finished is not run again.
type seqState uint8

const (
	seqReady   seqState = iota // built, no step taken
	seqRunning                 // stepping through its table
	seqDone                    // every step done
	seqFailed                  // a step failed and the completed ones were undone
)

var seqStateNames = [...]string{"ready", "running", "done", "failed"}

func (s seqState) String() string { return seqStateNames[s] }

// seqMoves are the transitions a sequence may take.
var seqMoves = map[seqState][]seqState{
	seqReady:   {seqRunning, seqFailed}, // failed: refused before its first step
	seqRunning: {seqDone, seqFailed},
}

// runner runs one sequence's table.
type runner struct {
	stepper stepper // announces, times and logs each step
	op      string  // "checkpoint", "pause", "restore": the failpoints' key
	id      string
	steps   []step
	state   seqState
	done    []step // completed steps, in order
	// given are the completed steps whose undo gave their work back.
	given map[StepName]bool

	// record, if set, records each step taken with its duration and
	// error (the manifest's Steps or RestoreSteps).
	record func(StepName, time.Duration, error)
	// interruptible stops the run between steps once ctx is cancelled:
	// a step such as CRIU's dump does not watch ctx itself.
	interruptible bool
	// committed, if set and true, ends interruptible: past that point an
	// interrupt is better served by finishing (the dumped processes are
	// gone, and the checkpoint is all that is left of them).
	committed func() bool
	// stopping, if set, runs on a failure before any undo (a checkpoint
	// stops its digest watcher and narrows its images' modes first).
	stopping func()
	// failed turns the failed step, its cause and the rollback's outcome
	// into the sequence's error.
	failed func(ctx context.Context, s StepName, err error, outcome string) error
	// untouched is the outcome when no undo had anything to say.
	untouched string
	// kept is the first failure of a soft step.
	kept error
}

// Done reports whether step s was completed in this run and not given
// back by its undo: the one record of what a sequence has done, which
// its steps and undos ask instead of keeping flags of their own.
func (r *runner) Done(s StepName) bool {
	if r == nil || r.given[s] {
		return false
	}
	for _, d := range r.done {
		if d.name == s {
			return true
		}
	}
	return false
}

// doneOutside records s as completed by someone else before this run: a
// step of the sequence that ran outside cryo's call (CRIU's dump, between
// its action script's pre-dump and post-dump).
func (r *runner) doneOutside(s StepName) { r.done = append(r.done, step{name: s}) }

// moveTo takes the transition to next, refusing one the table does not
// allow: a programming error, reported, never papered over.
func (r *runner) moveTo(next seqState) error {
	for _, ok := range seqMoves[r.state] {
		if ok == next {
			r.state = next
			return nil
		}
	}
	return fmt.Errorf("%s of %s: %w: %s to %s", r.op, r.id, ErrSequenceState, r.state, next)
}

// run takes every step of the table in order; the first failure rolls the
// completed ones back and returns the sequence's error.
func (r *runner) run(ctx context.Context) error {
	if err := r.moveTo(seqRunning); err != nil {
		return err
	}
	for _, s := range r.steps {
		if s.skip != nil && s.skip() {
			continue
		}
		if err := r.take(ctx, s); err != nil {
			if !s.soft {
				return r.fail(ctx, s.name, err)
			}
			if r.kept == nil {
				r.kept = err
			}
		}
		r.done = append(r.done, s)
	}
	return r.moveTo(seqDone)
}

// take runs one step as its kind asks.
func (r *runner) take(ctx context.Context, s step) error {
	r.stepper.hold(r.op, s.failpointName())
	if s.kind == kindSeal {
		return s.do(ctx)
	}
	// An interrupt (the CLI's Ctrl-C cancels ctx) stops the run between
	// steps: without this a cancelled checkpoint would carry on to the end.
	if r.interruptible && (r.committed == nil || !r.committed()) {
		if err := context.Cause(ctx); err != nil {
			r.note(s.name, 0, err)
			return fmt.Errorf("stopped before this step: %w", err)
		}
	}
	switch s.kind {
	case kindInner:
		return s.do(ctx)
	case kindTimed:
		d, err := r.stepper.take(ctx, r.id, s.name, s.do)
		r.note(s.name, d, err)
		return err
	}
	// A table with a kind this switch lacks: a programming error, refused
	// before the step runs rather than run unannounced.
	return fmt.Errorf("%s of %s: step %s has no kind %d", r.op, r.id, s.name, s.kind)
}

func (r *runner) note(s StepName, d time.Duration, err error) {
	if r.record != nil {
		r.record(s, d, err)
	}
}

// fail rolls back and returns the sequence's error for the failed step.
func (r *runner) fail(ctx context.Context, s StepName, err error) error {
	if merr := r.moveTo(seqFailed); merr != nil {
		return merr
	}
	if r.stopping != nil {
		r.stopping()
	}
	return r.failed(ctx, s, err, r.rollback(ctx))
}

// rollback undoes the completed steps in reverse and returns the outcome:
// the earliest step's word wins, as it speaks of what the processes are
// left as once everything after it was undone.
func (r *runner) rollback(ctx context.Context) string {
	outcome := r.untouched
	for i := len(r.done) - 1; i >= 0; i-- {
		if r.done[i].undo == nil {
			continue
		}
		u := r.done[i].undo(ctx)
		if u.gaveBack {
			if r.given == nil {
				r.given = map[StepName]bool{}
			}
			r.given[r.done[i].name] = true
		}
		if u.outcome != "" {
			outcome = u.outcome
		}
		if u.last {
			break
		}
	}
	return outcome
}

// failpointName is the name a failpoint knows the step by: the final
// write of the manifest is "final", apart from the manifest step.
func (s step) failpointName() StepName {
	if s.kind == kindSeal {
		return stepFinal
	}
	return s.name
}

// stepFinal names, for failpoints only, the final write of the manifest.
const stepFinal StepName = "final"
