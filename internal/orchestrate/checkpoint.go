package orchestrate

import (
	"context"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/progress"
	"github.com/cryo-gpu/cryo/internal/report"
)

// DumpFunc is the front end's dump of the (thawed, CUDA-suspended) target
// into the image directory: runc checkpoint, or CRIU for a bare process. It
// returns a *CRIUError when it has a log to point at.
type DumpFunc func(ctx context.Context) error

// checkpoint is one run of the checkpoint state machine. Each step moves it
// forward; what it has done, and so what a failure has to undo, is read
// from its runner's completed steps (suspended, dumped). What a failure
// does, and what the dump left to end, is its undo's (checkpointUndo);
// its image directory's watcher and digests are img's.
type checkpoint struct {
	suspension
	dir          string
	leaveRunning bool
	dump         DumpFunc
	img          images
}

// newCheckpoint is one run on t into imageDir, with its manifest, that
// leaves the processes running or not, and dumps with dump (nil for a
// dump that runs outside cryo's call).
func newCheckpoint(e env, t Target, imageDir string, leaveRunning bool, dump DumpFunc) *checkpoint {
	m := manifest.New(t.ID)
	m.CRIUWorkDir = t.CRIUWorkDir
	return &checkpoint{suspension: suspension{e: e, t: t, m: m}, dir: imageDir, leaveRunning: leaveRunning, dump: dump,
		img: images{dir: imageDir, id: t.ID, cfg: e.cfg, hash: e.hash, log: e.log}}
}

// take runs steps under the target's lock, once start has checked CRIU
// and made the image directory private, and then checks a leave-running
// checkpoint's processes (checkLeftRunning). The manifest is returned in
// both cases.
func (c *checkpoint) take(ctx context.Context, steps []step) (*manifest.Manifest, error) {
	release, err := c.start(ctx)
	if err != nil {
		return c.m, err
	}
	defer release()
	if err := c.runner(steps).run(ctx); err != nil {
		return c.m, err
	}
	return c.m, c.undo().checkLeftRunning(ctx)
}

// start checks CRIU, takes the target's lock and makes the image directory
// private: what comes before any step. It returns the lock's release.
func (c *checkpoint) start(ctx context.Context) (func(), error) {
	criuVersion, err := c.e.criu.version()
	c.m.CRIUVersion = criuVersion
	if err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: c.t.ID, Step: StepPrepare, Err: err, Outcome: "nothing was checkpointed, the processes were not touched"}
	}
	release, err := c.takeLock(ctx)
	if err != nil {
		return nil, c.e.locks.refused("checkpoint", c.t.ID, err)
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
	rec, _ := c.e.locks.pauses().read(c.t.ID)
	c.pausedBefore = rec != nil
	return release, nil
}

// runner is the step runner of this run over steps, each recorded in the
// manifest; the first failure rolls back what this run did.
func (c *checkpoint) runner(steps []step) *runner {
	c.r = &runner{stepper: c.e.stepper, op: "checkpoint", id: c.t.ID, steps: steps,
		record:        func(s StepName, d time.Duration, err error) { c.m.AddStep(string(s), d, err) },
		interruptible: true,
		committed:     func() bool { return c.undo().workloadGone() },
		stopping:      c.img.stop,
		failed: func(ctx context.Context, s StepName, err error, outcome string) error {
			return c.undo().stepError(ctx, s, err, outcome)
		},
		untouched: untouchedOutcome,
	}
	return c.r
}

// table is the whole checkpoint's: both phases, then the seal.
func (c *checkpoint) table() []step { return append(append(c.begin(), c.finish()...), c.seal()) }

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
		{name: StepSuspend, do: c.suspend, skip: c.noCUDA, undo: func(ctx context.Context) undone { return c.undo().undoSuspend(ctx) }},
		{name: StepManifest, do: c.writeManifest},
	}
}

// finish is the second phase: the dump, then the resume, then the
// digests. The resume comes before the digests so that a leave-running
// checkpoint gives the GPU back as soon as the images are written; hashing
// tens of GB must not extend the application's pause.
func (c *checkpoint) finish() []step {
	return []step{
		{name: StepDump, do: c.runDump, undo: func(ctx context.Context) undone { return c.undo().undoDump(ctx) }},
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
		c.undo().killStopped(ctx)
		if c.paused != nil && !c.leaveRunning {
			c.e.locks.pauses().remove(c.t.ID) // the paused processes went with the dump
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

// takeLock locks the target and its processes (lockTree) for the run.
func (c *checkpoint) takeLock(ctx context.Context) (func(), error) {
	l, release, err := lockTree(ctx, c.e.locks, "checkpoint", c.t)
	if err != nil {
		return nil, err
	}
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
	c.img.watchDump()
	if t := taskFrom(ctx); t != nil {
		t.SetEstimate(criu.DumpEstimate(c.pids, gpuBytes(c.m, c.toSuspend)))
		defer t.Poll(criu.PagesPoll, func() int64 { return criu.PagesBytes(c.dir) })()
	}
	return c.dump(ctx) // on failure, the runner's stopping stops the watcher (images.stop)
}

func (c *checkpoint) resume(ctx context.Context) error {
	if !c.suspended() {
		return nil
	}
	copyLine(ctx, c.m, c.toSuspend, c.rate)
	return c.e.gpu.resume(ctx, c.toSuspend)
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

// digests takes the digests of the image files (images.digests) into
// the manifest.
func (c *checkpoint) digests(ctx context.Context) error {
	d, err := c.img.digests(ctx)
	if err != nil {
		return err
	}
	c.m.Digests = d
	return nil
}

// wakeStep wakes the server a leave-running checkpoint gave back.
func (c *checkpoint) wakeStep() step {
	return step{name: StepWakeHook, skip: func() bool {
		return !c.leaveRunning || c.t.PreCheckpoint == nil || c.t.Wake == nil || c.pausedBefore
	},
		do: func(ctx context.Context) error { wake(ctx, c.e.log, c.t); return nil }}
}

// checkSpace refuses, before anything is suspended, a checkpoint whose
// images would not fit: CRIU would otherwise write until the disk is full,
// after the suspend and the freeze, and fail with "No space left on
// device". The estimate is the dump's progress estimate, taken before the
// suspend: the processes' dumpable memory plus the GPU memory the suspend
// will move into it.
func (c *checkpoint) checkSpace() error {
	if c.e.cfg.NoSpaceCheck {
		return nil
	}
	return fitsIn(c.dir, c.pids, gpuBytes(c.m, c.toSuspend))
}

// fitsIn refuses a dump of pids, with gpu bytes of GPU memory to move
// into it, that dir has not the room for.
func fitsIn(dir string, pids []int, gpu int64) error {
	need := criu.DumpEstimate(pids, 0) + gpu
	free, err := availBytes(dir)
	if err != nil || need <= free {
		return nil // a file system that cannot be asked is CRIU's to find out
	}
	return report.WithRemedy(fmt.Errorf("%w: the dump of %s is estimated at about %s and %s has %s free; nothing was suspended",
		ErrNoSpace, plural(len(pids), "process", "processes"), progress.Human(need), dir, progress.Human(free)),
		fmt.Sprintf("free at least %s in %s, or checkpoint into a directory on a file system with that much free "+
			"(a workload whose memory is mostly zeros, which cryo's CRIU leaves out, may fit: %s=0 skips this check)", progress.Human(need-free), dir, config.EnvSpaceCheck))
}
