package orchestrate

import (
	"cmp"
	"context"
	"errors"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// The GPU-free pause: a paused container gives its GPU memory back.
//
//	running ─lock─ find ─ inventory ─ suspend CUDA ─ record ─ freeze→ paused
//	paused  ─lock─ thaw ─ find ─ resume CUDA (the record's, still suspended) → running
//
// Pause suspends CUDA (the driver's lock+checkpoint, the checkpoint's own
// suspend step) before it freezes the cgroup: the driver cannot lock frozen
// threads. Resume thaws first for the same reason, then resumes CUDA. Every
// failure of a pause returns the container to running with CUDA resumed;
// a resume that thaws but cannot resume CUDA says so, with its remedy.
//
// The record (pauserecord.go) says which processes the pause suspended: a
// process suspended by `cryo cuda suspend` is not the pause's to resume. A
// checkpoint of the paused container (containerd pauses every task before
// its checkpoint) dumps those processes as they are and leaves them to the
// resume that follows.

// StepFreeze is the front end's freeze of the cgroup (runc pause).
const StepFreeze StepName = "freeze"

// StepRecord writes which processes a pause suspended.
const StepRecord StepName = "record"

// ErrPauseResume: the container was thawed but CUDA could not be resumed.
var ErrPauseResume = errors.New("CUDA could not be resumed after the pause")

// pauseTarget is one Pause: under the target's lock, the pause's table
// on its runner.
func pauseTarget(ctx context.Context, e env, t Target, freeze func(context.Context) error) error {
	l, release, err := e.locks.hold(t.Lock, "pause", t.ID)
	if err != nil {
		return e.locks.refused("pause", t.ID, err)
	}
	defer release()
	p := &pause{suspension: suspension{e: e, t: t, m: manifest.New(t.ID), lock: l}, freeze: freeze}
	p.r = &runner{stepper: e.stepper, op: "pause", id: t.ID, steps: p.table(),
		// Between steps an interrupt stops the pause and the rollback
		// resumes what it suspended: the container is left running.
		interruptible: true,
		failed:        p.failed,
		untouched:     pauseUntouched,
	}
	return p.r.run(ctx)
}

// pause is one run of the GPU-free pause, over the suspension it makes.
type pause struct {
	suspension
	freeze func(context.Context) error // the front end's freeze of the cgroup
}

// table is the GPU-free pause's steps.
func (p *pause) table() []step {
	return []step{
		// A GPU-free pause is the driver's checkpoint: a server asked to
		// sleep before one gives back its cache instead of having it copied.
		p.preHookStep(),
		// find without the dump's checks: a pause copies nothing.
		{name: StepFind, do: func(ctx context.Context) error { return p.findWith(ctx, nil) }},
		{name: StepInventory, do: p.takeInventory, skip: p.noCUDA},
		{name: StepSuspend, do: p.suspend, skip: p.noCUDA, undo: p.undoSuspend},
		// Recorded also when only the hook ran: the resume wakes the server.
		{name: StepRecord, do: func(context.Context) error { return p.record() }, skip: func() bool { return p.noCUDA() && p.t.PreCheckpoint == nil }},
		{name: StepFreeze, do: p.freeze},
	}
}

// pauseUntouched is a failed pause's outcome when no undo had anything
// to say.
const pauseUntouched = "the container was left running, CUDA untouched"

// record writes the processes this pause suspended, with what the
// inventory learnt of them while they still held their GPU memory.
func (p *pause) record() error {
	r := &pauseRecord{ID: p.t.ID}
	for _, proc := range p.m.Processes {
		for _, pid := range p.toSuspend {
			if proc.PID == pid {
				r.Processes = append(r.Processes, proc)
			}
		}
	}
	return p.e.locks.pauses().write(r)
}

// failed says which step of a pause failed; the runner's rollback has
// returned the container to running (internal/cuda has already rolled back a
// failed suspend).
func (p *pause) failed(ctx context.Context, step StepName, err error, outcome string) error {
	// The server a pre-checkpoint hook put to sleep wakes once the
	// rollback has given the processes back.
	if p.r.Done(StepPreHook) {
		wake(context.WithoutCancel(ctx), p.e.log, p.t)
	}
	e := &report.StepError{Op: "pause", ID: p.t.ID, Step: string(step), Remedy: pauseRemedies[step]}
	e.Err, e.Outcome = rolledBackOutcome(err, outcome, pauseUntouched)
	// Checked as a failed checkpoint is: the outcome says the container
	// runs only once the check found it so, and a contradicting check
	// brings the remedy that applies. An interrupt's message says once
	// what was undone.
	var remedy string
	e.Outcome, e.Fate, remedy = p.undo().checkedOutcome(ctx, step, e.Outcome, interrupted(ctx), dumpState{})
	if interrupted(ctx) {
		e.Remedy = cmp.Or(remedy, "none needed; pause the container again when you are ready")
		return e
	}
	if remedy != "" {
		e.Remedy = remedy
		return e
	}
	if errors.Is(err, cuda.ErrTimeout) {
		e.Remedy = "retry when the container's GPU work can pause, or pause it freeze-only (" + freezeOnlyHint + ")"
	}
	if step == StepPreHook {
		// containerd pauses every task before its checkpoint: the
		// pre-checkpoint hook runs then, before the pause's suspend.
		e.Remedy = preHookRemedy(err)
	}
	return e
}

// undoSuspend resumes the CUDA the pause suspended, its record gone
// first: a record left behind would make the next resume think it paused.
func (p *pause) undoSuspend(ctx context.Context) undone {
	if !p.suspended() {
		return undone{}
	}
	p.e.locks.pauses().remove(p.t.ID)
	return undone{outcome: p.undo().rollback(ctx)}
}

const freezeOnlyHint = "annotation cryo.gpu-free-pause=false, or CRYO_GPU_FREE_PAUSE=0"

var pauseRemedies = map[StepName]string{
	StepFind:      "run `cryo cuda state PID` for the container's processes, then retry",
	StepInventory: "the container's processes hold GPU memory the driver cannot restore (CUDA IPC between processes, or JAX on several GPUs): pause it freeze-only (" + freezeOnlyHint + "), or start them as the error says",
	StepSuspend:   "run `cryo doctor` and `cryo cuda state PID` to see what the driver reports, then retry",
	StepRecord:    "check that the lock directory (CRYO_LOCK_DIR) is writable, then retry",
	StepFreeze:    "check the container's cgroup (is another tool freezing it?) and retry",
}

// AnnGPUFreePause is the container annotation that turns the GPU-free
// pause off for one container: "false" (or "0") pauses it freeze-only.
const AnnGPUFreePause = "cryo.gpu-free-pause"
