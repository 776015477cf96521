package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/report"
)

// DumpFunc is the front end's dump of the (thawed, CUDA-suspended) target
// into the image directory: runc checkpoint, or CRIU for a bare process. It
// returns a *CRIUError when it has a log to point at.
type DumpFunc func(ctx context.Context) error

// checkpoint is one run of the checkpoint state machine. Each step moves it
// forward; what it has done, and so what a failure has to undo, is read
// from its runner's completed steps (suspended, dumped).
type checkpoint struct {
	suspension
	dir          string
	leaveRunning bool
	dump         DumpFunc

	watch *digest.Watcher // hashes the page images while they are written
}

// Checkpoint thaws the target, suspends CUDA, writes the manifest into
// imageDir, calls dump, then resumes CUDA (leaveRunning) or leaves the
// processes to exit with the dump, and finally records the digests of the
// image files in the manifest.
//
// On any failure before the dump has succeeded it resumes CUDA and returns
// a *StepError naming the target, the step, the cause, the CRIU log when
// there is one, and a remedy; the processes keep running. The manifest,
// with the duration of every step taken, is returned in both cases.
func (o *Orchestrator) Checkpoint(ctx context.Context, t Target, imageDir string, leaveRunning bool, dump func(ctx context.Context) error) (*manifest.Manifest, error) {
	c := o.newCheckpoint(t, imageDir)
	c.leaveRunning, c.dump = leaveRunning, dump
	release, err := c.start(ctx)
	if err != nil {
		return c.m, err
	}
	defer release()
	if err := c.run(ctx, append(append(c.begin(), c.finish()...), c.seal())); err != nil {
		return c.m, err
	}
	return c.m, c.checkLeftRunning(ctx)
}

// BeginCheckpoint runs the first phase alone (thaw, find, inventory,
// suspend, manifest), for a dump that runs outside cryo's call: CRIU's
// pre-dump action script, whose CRIU dumps once the script has returned.
// On failure CUDA is resumed and the processes run on, as for Checkpoint.
// On success the CUDA processes are left suspended for that dump, and the
// manifest has no digests: the caller resumes the processes after the dump
// if they still run, and takes the digests (digest.Files).
func (o *Orchestrator) BeginCheckpoint(ctx context.Context, t Target, imageDir string) (*manifest.Manifest, error) {
	c := o.newCheckpoint(t, imageDir)
	release, err := c.start(ctx)
	if err != nil {
		return c.m, err
	}
	defer release()
	return c.m, c.run(ctx, c.begin())
}

// newCheckpoint is one run on t into imageDir, with its manifest.
func (o *Orchestrator) newCheckpoint(t Target, imageDir string) *checkpoint {
	m := manifest.New(t.ID)
	m.CRIUWorkDir = t.CRIUWorkDir
	return &checkpoint{suspension: suspension{o: o, t: t, m: m}, dir: imageDir}
}

// start checks CRIU, takes the target's lock and makes the image directory
// private: what comes before any step. It returns the lock's release.
func (c *checkpoint) start(ctx context.Context) (func(), error) {
	criuVersion, err := c.o.checkCRIU()
	c.m.CRIUVersion = criuVersion
	if err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: c.t.ID, Step: StepPrepare, Err: err, Outcome: "nothing was checkpointed, the processes were not touched"}
	}
	release, err := c.takeLock(ctx)
	if err != nil {
		return nil, c.o.lockError("checkpoint", c.t.ID, err)
	}
	// Owner-only before the first page is written: CRIU writes its images
	// with its own umask, readable by all, until the digests step narrows
	// them.
	if err := manifest.PrivateDir(c.dir); err != nil {
		release()
		return nil, &report.StepError{Op: "checkpoint", ID: c.t.ID, Step: StepPrepare, Err: err, Outcome: "nothing was checkpointed, the processes were not touched",
			Remedy: "give an image directory that this user can create and chmod"}
	}
	// Read once, under the lock, before the steps: the hook steps' skips
	// ask it, and a pause or resume of the target waits for the lock.
	rec, _ := c.o.pauses().read(c.t.ID)
	c.pausedBefore = rec != nil
	return release, nil
}

// run runs steps through the step runner, each recorded in the manifest;
// the first failure rolls back what this run did and is returned.
func (c *checkpoint) run(ctx context.Context, steps []step) error {
	return c.runner(steps).run(ctx)
}

// runner is the step runner of this run over steps.
func (c *checkpoint) runner(steps []step) *runner {
	c.r = &runner{o: c.o, op: "checkpoint", id: c.t.ID, steps: steps,
		record:        func(s StepName, d time.Duration, err error) { c.m.AddStep(string(s), d, err) },
		interruptible: true,
		committed:     c.workloadGone,
		stopping:      c.stopping,
		failed:        c.stepError,
		untouched:     untouchedOutcome,
	}
	return c.r
}

// begin is the first phase: after it the CUDA processes are suspended and
// the manifest (without digests) is written, ready for the dump.
func (c *checkpoint) begin() []step {
	return []step{
		{name: StepThaw, do: c.thaw, skip: func() bool { return c.t.Thaw == nil }},
		// Before anything is suspended, after the thaw: a frozen server
		// cannot answer.
		c.preHookStep(),
		{name: StepFind, do: c.find},
		{name: StepInventory, do: c.inventory, skip: func() bool { return !c.m.HasCUDA() }},
		{name: StepSuspend, do: c.suspend, skip: c.noCUDA, undo: c.undoSuspend},
		{name: StepManifest, do: c.writeManifest},
	}
}

// finish is the second phase: the dump, then the resume, then the
// digests. The resume comes before the digests so that a leave-running
// checkpoint gives the GPU back as soon as the images are written; hashing
// tens of GB must not extend the application's pause.
func (c *checkpoint) finish() []step {
	return []step{
		{name: StepDump, do: c.runDump, undo: c.undoDump},
		{name: StepResume, do: c.resume, skip: func() bool { return !c.leaveRunning || c.noCUDA() }},
		c.wakeStep(),
		{name: StepDigests, do: c.digests},
	}
}

// seal is the tail that Checkpoint and EndCheckpoint share: the final
// write of the manifest, then, the checkpoint being durable, what the
// dump left to end. A failure of the write is the manifest step's.
func (c *checkpoint) seal() step {
	return step{name: StepManifest, kind: kindSeal, do: func(ctx context.Context) error {
		// Write syncs the file system: the images, digests and manifest
		// are on disk before the processes may go.
		if err := manifest.Write(c.dir, c.m); err != nil {
			return err
		}
		// Checked, not assumed: the processes go only once the
		// manifest reads back complete and every file it names is there.
		if err := checkComplete(c.dir); err != nil {
			return err
		}
		c.killStopped(ctx)
		if c.paused != nil && !c.leaveRunning {
			c.o.pauses().remove(c.t.ID) // the paused processes went with the dump
		}
		return nil
	}}
}

// inventory is the suspension's inventory, then the check that the
// dump fits, GPU memory known.
func (c *checkpoint) inventory(ctx context.Context) error {
	if err := c.takeInventory(ctx); err != nil {
		return err
	}
	return c.checkSpace()
}

// dumpState is what the dump did, for the check of a failed run.
func (c *checkpoint) dumpState() dumpState {
	return dumpState{dir: c.dir, dumped: c.dumped(), gone: c.workloadGone()}
}

// workloadGone: the dump ended the processes (no leave-running, and not
// held stopped): an interrupt then completes the checkpoint rather than
// abandon the only copy of the workload.
func (c *checkpoint) workloadGone() bool {
	return c.dumped() && !c.leaveRunning && !c.t.DumpLeavesStopped
}

// dumped: the dump succeeded, and no undo gave the processes back since
// (without leaveRunning they are then gone, or held stopped).
func (c *checkpoint) dumped() bool { return c.r.Done(StepDump) }

// takeLock locks the target and its processes before anything is touched,
// the thaw included: a second checkpoint that thawed or suspended under a
// first one would corrupt what the first one copies. The front end's lock
// (Target.Lock) is used as it is.
func (c *checkpoint) takeLock(ctx context.Context) (func(), error) {
	l, release, err := c.o.lockFor(c.t.Lock, "checkpoint", c.t.ID)
	if err != nil {
		return nil, err
	}
	pids, err := c.t.PIDs(ctx)
	if err == nil {
		err = l.AddPIDs(pids)
	}
	if err != nil && errors.Is(err, lock.ErrBusy) {
		release()
		return nil, err
	}
	// Any other error is find's to report, with its remedy.
	c.lock = l
	return release, nil
}

func (c *checkpoint) thaw(ctx context.Context) error { return c.t.Thaw(ctx) }

// find lists the target's processes and the CUDA ones among them, and
// checks that CRIU can dump them (and, without CUDA, that they fit).
func (c *checkpoint) find(ctx context.Context) error {
	if err := c.findWith(ctx, preflightDump); err != nil || c.m.HasCUDA() {
		return err // with CUDA, inventory checks the space, GPU memory known
	}
	return c.checkSpace()
}

// recordedGPUs is the GPU view of each process as the manifest records it.
func recordedGPUs(procs []manifest.Process) []cuda.ProcessGPUs {
	out := make([]cuda.ProcessGPUs, len(procs))
	for i, p := range procs {
		out[i] = cuda.ProcessGPUs{PID: p.PID, GPUs: p.GPUs, Evidence: p.Evidence}
		if p.VisibleDevices != nil {
			out[i].VisibleDevices = *p.VisibleDevices
		}
	}
	return out
}

// untouchedOutcome is a failed checkpoint's outcome when no undo had
// anything to say.
const untouchedOutcome = "the processes were left running, CUDA untouched"

// driverRolledBack is the outcome of a suspend step whose failure
// internal/cuda rolled back (cuda.ErrRolledBack); an interrupted one
// keeps only what was done (undoneOnly).
const driverRolledBack = "the processes were left running; the suspend's own rollback resumed CUDA"

// writeManifest writes the manifest before the dump, so that a checkpoint
// interrupted after the dump still says what it holds (without digests,
// which makes a restore refuse it).
func (c *checkpoint) writeManifest(ctx context.Context) error { return manifest.Write(c.dir, c.m) }

// runDump dumps with the digest watcher running, so that most of the pages
// are hashed by the time the dump ends (cores CRIU does not use).
func (c *checkpoint) runDump(ctx context.Context) error {
	if !c.o.Config.HashAfterDump {
		c.watch = digest.Watch(c.dir)
	}
	if t := taskFrom(ctx); t != nil {
		t.SetEstimate(criu.DumpEstimate(c.pids, gpuBytes(c.m, c.toSuspend)))
		defer t.Poll(criu.PagesPoll, func() int64 { return criu.PagesBytes(c.dir) })()
	}
	return c.dump(ctx) // on failure, fail stops the watcher
}

func (c *checkpoint) resume(ctx context.Context) error {
	if !c.suspended() {
		return nil
	}
	c.copyLine(ctx)
	return c.o.ResumeCUDA(ctx, c.toSuspend)
}

// StillSuspended lists the CUDA processes of a leave-running checkpoint
// that were suspended before it (by `cryo cuda suspend`) and that it left
// suspended, as it found them: the front ends tell the user to resume them.
func StillSuspended(m *manifest.Manifest) []int {
	var pids []int
	if m == nil {
		return nil
	}
	for _, p := range m.Processes {
		if p.State == cuda.StateCheckpointed.String() && !p.Paused {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

func (c *checkpoint) digests(ctx context.Context) error {
	// Before the digests and the stamp: chmod changes ctime, which the
	// stamp records.
	if err := manifest.MakePrivate(c.dir); err != nil {
		return err
	}
	w := c.watch
	c.watch = nil
	var d map[string]string
	var err error
	if w != nil {
		d, err = w.FinishWith(taskFrom(ctx))
	} else {
		d, err = c.o.hashImages(c.dir, taskFrom(ctx))
	}
	if err != nil {
		return err
	}
	c.m.Digests = d
	// A restore on this host can then trust these digests without reading
	// the image again, as long as no file has changed (see digest.Stamp).
	if err := digest.RecordsFrom(c.o.Config).Stamp(c.dir, d); err != nil {
		c.o.log().Debug("no verification stamp: the restore will hash the image", "id", c.t.ID, "error", err)
	}
	return nil
}

// wakeStep wakes the server a leave-running checkpoint gave back.
func (c *checkpoint) wakeStep() step {
	return step{name: StepWakeHook, skip: func() bool {
		return !c.leaveRunning || c.t.PreCheckpoint == nil || c.t.Wake == nil || c.pausedBefore
	},
		do: func(ctx context.Context) error { c.wake(ctx); return nil }}
}

// checkSpace refuses, before anything is suspended, a checkpoint whose
// images would not fit: CRIU would otherwise write until the disk is full,
// after the suspend and the freeze, and fail with "No space left on
// device". The estimate is the dump's progress estimate, taken before the
// suspend: the processes' dumpable memory plus the GPU memory the suspend
// will move into it.
func (c *checkpoint) checkSpace() error {
	if c.o.Config.NoSpaceCheck {
		return nil
	}
	need := criu.DumpEstimate(c.pids, 0) + gpuBytes(c.m, c.toSuspend)
	free, err := availBytes(c.dir)
	if err != nil || need <= free {
		return nil // a file system that cannot be asked is CRIU's to find out
	}
	return report.WithRemedy(fmt.Errorf("%w: the dump of %s is estimated at about %s and %s has %s free; nothing was suspended",
		ErrNoSpace, plural(len(c.pids), "process", "processes"), progress.Human(need), c.dir, progress.Human(free)),
		fmt.Sprintf("free at least %s in %s, or checkpoint into a directory on a file system with that much free "+
			"(a workload whose memory is mostly zeros, which cryo's CRIU leaves out, may fit: %s=0 skips this check)", progress.Human(need-free), c.dir, config.EnvSpaceCheck))
}

// stepNames are the failpoint names of c's table, its skips applied.
func (c *checkpoint) stepNames() []StepName {
	var names []StepName
	for _, s := range append(append(c.begin(), c.finish()...), c.seal()) {
		if s.skip == nil || !s.skip() {
			names = append(names, s.failpointName())
		}
	}
	return names
}
