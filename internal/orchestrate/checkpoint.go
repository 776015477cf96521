package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
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
	o            *Orchestrator
	t            Target
	dir          string
	leaveRunning bool
	dump         DumpFunc
	m            *manifest.Manifest

	r         *runner      // the run's steps: what is done
	lock      *lock.Lock   // held for the whole run: no other run touches the target meanwhile
	pids      []int        // the target's processes
	toSuspend []int        // CUDA processes found running, suspended by us
	paused    *pauseRecord // the GPU-free pause that suspended some of them, if any
	// pausedBefore: a GPU-free pause holds the target (its record was
	// there when the run began), which ran the pre-checkpoint hook.
	pausedBefore bool

	watch *digest.Watcher // hashes the page images while they are written
	rate  float64         // bytes/s of this run's CUDA suspend, for the resume's ETA
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
	return &checkpoint{o: o, t: t, dir: imageDir, m: m}
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
	rec, _ := c.o.readPause(c.t.ID)
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
			c.o.removePause(c.t.ID) // the paused processes went with the dump
		}
		return nil
	}}
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

// suspended: CUDA is suspended by this run, and no resume step brought it
// back: a failure must resume it.
func (c *checkpoint) suspended() bool { return c.r.Done(StepSuspend) && !c.r.Done(StepResume) }

// noCUDA: this run suspends no CUDA process, so it has none to resume.
func (c *checkpoint) noCUDA() bool { return len(c.toSuspend) == 0 }

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

// findWith is find with its own check of the processes found (nil: none).
// Find asks the driver only about processes that map libcuda or hold
// /dev/nvidia*, so a CPU-only target works on a host without a driver.
func (c *checkpoint) findWith(ctx context.Context, check func(pids []int) error) error {
	pids, procs, skipped, err := c.o.findCUDA(ctx, c.t)
	if err != nil {
		return err
	}
	c.pids = pids
	// The tree may have grown since takeLock listed it.
	if err := c.lock.AddPIDs(pids); err != nil {
		return err
	}
	if check != nil {
		if err := check(pids); err != nil {
			return err
		}
	}
	return c.classifyFound(procs, skipped)
}

// classifyFound classifies procs, with the pause record of the target if a
// GPU-free pause suspended some of them.
func (c *checkpoint) classifyFound(procs []cuda.Process, skipped []cuda.Skipped) error {
	for _, s := range skipped {
		c.o.log().Debug("not a CUDA process", "id", c.t.ID, "pid", s.PID, "reason", s.Reason)
	}
	var err error
	if c.paused, err = c.o.readPause(c.t.ID); err != nil {
		c.o.log().Warn("pause record unreadable: processes suspended by a pause are dumped as if the user had suspended them", "id", c.t.ID, "error", err)
	}
	return c.classify(procs)
}

// classify records every CUDA process in the manifest and picks the running
// ones to suspend. One already checkpointed was suspended by the user
// (`cryo cuda suspend`): no other cryo run can hold it while we hold the
// lock. It is dumped as it is and left suspended for its owner to resume
// (see StillSuspended). A locked or failed one cannot be dumped safely.
func (c *checkpoint) classify(procs []cuda.Process) error {
	for _, p := range procs {
		switch p.State {
		case cuda.StateRunning:
			c.toSuspend = append(c.toSuspend, p.PID)
		case cuda.StateCheckpointed:
			if _, ok := c.paused.owns(p.PID); ok {
				// The pause that suspended it resumes it: not this run's.
				c.o.log().Info("CUDA process suspended by a GPU-free pause: dumped as it is, the resume brings it back", "id", c.t.ID, "pid", p.PID)
				break
			}
			c.o.log().Warn("CUDA process suspended before this checkpoint: dumped as it is, and left suspended", "id", c.t.ID, "pid", p.PID)
		default:
			return fmt.Errorf("CUDA process %d is %s (a driver call of another tool is under way, or one was interrupted): %w; run `cryo cuda state %d`, and `cryo recover %d` once nothing else checkpoints it", p.PID, p.State, cuda.ErrBadState, p.PID, p.PID)
		}
		c.m.Processes = append(c.m.Processes, manifest.Process{PID: p.PID, State: p.State.String()})
	}
	return nil
}

// inventory records the GPUs while the processes still hold their memory,
// and which GPUs each process sees and holds memory on: that is what a
// restore must give back. It refuses, before anything is suspended, what
// the driver would lose: NCCL ranks that share GPU memory, JAX processes
// on several GPUs, and a process whose CUDA_VISIBLE_DEVICES selects fewer
// GPUs than it holds (no restore would match it).
func (c *checkpoint) inventory(ctx context.Context) error {
	inv, err := c.o.driver().Inventory(ctx)
	if err != nil {
		// The checkpoint is still good; only the restore's host check loses
		// its data, so warn instead of failing.
		c.o.log().Warn("GPU inventory unavailable: the restore cannot check the target host", "id", c.t.ID, "error", err)
	}
	views, err := c.describe(inv)
	if err != nil {
		return err
	}
	if !c.o.AllowCUDAIPC {
		if err := errors.Join(cuda.CheckIPC(views), cuda.CheckXLA(views, inv)); err != nil {
			return err
		}
	}
	c.m.Inventory = inv
	for i, v := range views {
		if rec, ok := c.paused.owns(c.m.Processes[i].PID); ok && c.m.Processes[i].State == cuda.StateCheckpointed.String() {
			// Suspended by a pause: its GPUs and memory are what the
			// pause's inventory saw, before the suspend freed them.
			rec.State, rec.Paused = c.m.Processes[i].State, true
			c.m.Processes[i] = rec
			continue
		}
		c.m.Processes[i].NSPID, c.m.Processes[i].GPUs, c.m.Processes[i].Evidence = v.NSPID, v.GPUs, v.Evidence
		c.m.Processes[i].VisibleDevices, c.m.Processes[i].NCCL = &v.VisibleDevices, v.NCCL
		for _, g := range v.GPUs {
			c.m.Processes[i].GPUMemory += g.Memory
		}
	}
	c.m.Needs = manifest.NeedsFromProcesses(c.m.Processes)
	// What no restore could give back is refused whatever the flags say:
	// checked on what the manifest records, which for a process a GPU-free
	// pause suspended is what it held before that suspend.
	if err := cuda.CheckVisible(recordedGPUs(c.m.Processes), inv); err != nil {
		return err
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

// describe learns each CUDA process's GPUs, in manifest order.
func (c *checkpoint) describe(inv cuda.Inventory) ([]cuda.ProcessGPUs, error) {
	views := make([]cuda.ProcessGPUs, 0, len(c.m.Processes))
	for _, p := range c.m.Processes {
		if _, ok := c.paused.owns(p.PID); ok && p.State == cuda.StateCheckpointed.String() {
			views = append(views, cuda.ProcessGPUs{}) // the pause's record has it
			continue
		}
		v, err := inv.Describe(p.PID)
		if err != nil {
			return nil, fmt.Errorf("which GPUs pid %d uses: %w", p.PID, err)
		}
		if len(v.GPUs) == 0 && len(inv.GPUs) > 0 {
			c.o.log().Warn("no GPU found for a CUDA process: the restore cannot check its GPUs", "id", c.t.ID, "pid", p.PID, "evidence", v.Evidence)
		}
		views = append(views, v)
	}
	return views, nil
}

func (c *checkpoint) suspend(ctx context.Context) error {
	if len(c.toSuspend) == 0 {
		return nil
	}
	if c.t.DumpFreezes {
		if err := c.o.checkSeizeStopped(ctx); err != nil {
			return err
		}
	}
	bytes := gpuBytes(c.m, c.toSuspend)
	taskFrom(ctx).SetTotal(bytes)
	start := time.Now()
	// internal/cuda rolls back the processes it already suspended when one fails,
	// so a failure here leaves nothing suspended.
	if err := c.o.driver().Suspend(ctx, c.toSuspend, c.o.setOptions(nil)); err != nil {
		return err
	}
	c.rate = measuredRate(bytes, time.Since(start))
	return nil
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

// copyLine gives the line of a resume or rollback the GPU memory it copies
// back and the rate of this run's suspend.
func (c *checkpoint) copyLine(ctx context.Context) {
	t := taskFrom(ctx)
	t.SetTotal(gpuBytes(c.m, c.toSuspend))
	if c.rate > 0 {
		t.SetRate(c.rate)
	}
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
