package orchestrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/procfs"
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

// Pause suspends the CUDA processes of t, then calls freeze (runc pause).
// With no CUDA process it only freezes, as runc would.
func (o *Orchestrator) Pause(ctx context.Context, t Target, freeze func(context.Context) error) error {
	l, release, err := o.lockFor(t.Lock, "pause", t.ID)
	if err != nil {
		return o.lockError("pause", t.ID, err)
	}
	defer release()
	p := &pause{suspension: suspension{o: o, t: t, m: manifest.New(t.ID), lock: l}, freeze: freeze}
	p.r = &runner{o: o, op: "pause", id: t.ID, steps: p.table(),
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
	return p.o.writePause(r)
}

// failed says which step of a pause failed; the runner's rollback has
// returned the container to running (internal/cuda has already rolled back a
// failed suspend).
func (p *pause) failed(ctx context.Context, step StepName, err error, outcome string) error {
	// The server a pre-checkpoint hook put to sleep wakes once the
	// rollback has given the processes back.
	if p.r.Done(StepPreHook) {
		p.wake(context.WithoutCancel(ctx))
	}
	e := &report.StepError{Op: "pause", ID: p.t.ID, Step: string(step), Remedy: pauseRemedies[step]}
	e.Err, e.Outcome = rolledBackOutcome(err, outcome, pauseUntouched)
	// Checked as a failed checkpoint is: the outcome says the container
	// runs only once the check found it so, and a contradicting check
	// brings the remedy that applies. An interrupt's message says once
	// what was undone.
	var remedy string
	e.Outcome, e.Fate, remedy = p.checkedOutcome(ctx, step, e.Outcome, interrupted(ctx), dumpState{})
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
	p.o.removePause(p.t.ID)
	return undone{outcome: p.rollback(ctx)}
}

const freezeOnlyHint = "annotation cryo.gpu-free-pause=false, or CRYO_GPU_FREE_PAUSE=0"

var pauseRemedies = map[StepName]string{
	StepFind:      "run `cryo cuda state PID` for the container's processes, then retry",
	StepInventory: "the container's processes hold GPU memory the driver cannot restore (CUDA IPC between processes, or JAX on several GPUs): pause it freeze-only (" + freezeOnlyHint + "), or start them as the error says",
	StepSuspend:   "run `cryo doctor` and `cryo cuda state PID` to see what the driver reports, then retry",
	StepRecord:    "check that the lock directory (CRYO_LOCK_DIR) is writable, then retry",
	StepFreeze:    "check the container's cgroup (is another tool freezing it?) and retry",
}

// Resume calls thaw (runc resume), then resumes CUDA in the processes the
// pause suspended. Without a pause record it only thaws, as runc would.
//
// An interrupt does not stop a resume: it only gives back, and stopped
// between the thaw and the CUDA resume it would leave the container
// thawed with its processes held stopped.
func (o *Orchestrator) Resume(ctx context.Context, t Target, thaw func(context.Context) error) error {
	ctx, cancel := uninterrupted(ctx)
	defer cancel()
	_, release, err := o.lockFor(t.Lock, "resume", t.ID)
	if err != nil {
		return o.lockError("resume", t.ID, err)
	}
	defer release()
	r, err := o.readPause(t.ID)
	if err != nil {
		o.log().Warn("pause record unreadable: CUDA is not resumed", "id", t.ID, "error", err)
	}
	// Resume is two steps, not a table: a failpoint holds it before each.
	failpoint(o, "resume", StepThaw)
	if _, err := o.step(ctx, t.ID, StepThaw, thaw); err != nil {
		if r != nil && !o.anyAlive(r.pids()) {
			o.removePause(t.ID) // the processes are gone (a checkpoint with --exit)
		}
		return &report.StepError{Op: "resume", ID: t.ID, Step: StepThaw, Err: err, Outcome: "the container stays paused",
			Remedy: "check the container's state and its cgroup, then retry"}
	}
	if r == nil {
		return nil
	}
	failpoint(o, "resume", StepResume)
	_, err = o.step(ctx, t.ID, StepResume, func(ctx context.Context) error { return o.resumePaused(ctx, t, r) })
	o.removePause(t.ID)
	if err != nil {
		return o.resumeError(ctx, t.ID, r.pids(), err)
	}
	o.wakeAfterPause(ctx, t)
	return nil
}

// resumePaused resumes the record's processes that the driver still
// reports suspended: a process that exited, or that someone else resumed
// (`cryo cuda resume`), is not resumed twice.
func (o *Orchestrator) resumePaused(ctx context.Context, t Target, r *pauseRecord) error {
	_, procs, _, err := o.findCUDA(ctx, t)
	if err != nil {
		return err
	}
	var pids []int
	for _, p := range procs {
		if _, ok := r.owns(p.PID); ok && p.State == cuda.StateCheckpointed {
			pids = append(pids, p.PID)
		}
	}
	if len(pids) == 0 {
		return nil
	}
	return o.driver().Resume(ctx, pids, o.setOptions(nil))
}

// resumeError says that the container was thawed but CUDA did not come
// back: its processes are suspended still, or their GPU state is lost;
// what each process is now is looked at, not assumed.
func (o *Orchestrator) resumeError(ctx context.Context, id string, pids []int, err error) error {
	e := &report.StepError{Op: "resume", ID: id, Step: StepResume, Err: fmt.Errorf("%w: %w", ErrPauseResume, err),
		Outcome: "the container is thawed, but " + procsNow(pids),
		Remedy:  "run `cryo cuda resume " + pidList(pids) + "`"}
	if lost := o.driver().LostPIDs(ctx, pids, err); len(lost) > 0 {
		e.Outcome = "the container is thawed, but the GPU state of processes " + fmt.Sprint(lost) + " is lost; " + procsNow(pids)
		e.Remedy = "restart the container (or restore it from a checkpoint)"
	}
	return e
}

// anyAlive reports whether one of pids still runs: a zombie is a process
// that died, whose GPU state nobody will resume.
func (o *Orchestrator) anyAlive(pids []int) bool {
	for _, p := range pids {
		if procfs.Alive(p) {
			return true
		}
	}
	return false
}

// AnnGPUFreePause is the container annotation that turns the GPU-free
// pause off for one container: "false" (or "0") pauses it freeze-only.
const AnnGPUFreePause = "cryo.gpu-free-pause"

// GPUFreePause reports whether a pause of a container with these
// annotations suspends CUDA first: yes unless the configuration
// ($CRYO_GPU_FREE_PAUSE=0) or the annotation turns it off.
func (o *Orchestrator) GPUFreePause(annotations map[string]string) bool {
	if v, ok := annotations[AnnGPUFreePause]; ok {
		return v != "false" && v != "0"
	}
	return !o.Config.FreezeOnlyPause
}
