package orchestrate

import (
	"context"

	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// The entry points that the front ends call. Each is one call of a
// sequence or a helper over the Orchestrator's env: the sequences live in
// the files of their own (checkpoint.go, pause.go, restoreseq.go, ...),
// and take what they use of the Orchestrator as a value.

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
	c := newCheckpoint(o.env(), t, imageDir, leaveRunning, dump)
	return c.take(ctx, c.table())
}

// BeginCheckpoint runs the first phase alone (thaw, find, inventory,
// suspend, manifest), for a dump that runs outside cryo's call: CRIU's
// pre-dump action script, whose CRIU dumps once the script has returned.
// On failure CUDA is resumed and the processes run on, as for Checkpoint.
// On success the CUDA processes are left suspended for that dump, and the
// manifest has no digests: the caller resumes the processes after the dump
// if they still run, and takes the digests (digest.Files).
func (o *Orchestrator) BeginCheckpoint(ctx context.Context, t Target, imageDir string) (*manifest.Manifest, error) {
	c := newCheckpoint(o.env(), t, imageDir, false, nil)
	return c.take(ctx, c.begin())
}

// EndCheckpoint is the second phase of a checkpoint whose dump ran outside
// cryo's call (CRIU's post-dump action, after BeginCheckpoint at pre-dump):
// it records how long CRIU's dump took, takes the digests (the same step as
// Checkpoint's, stamp included) and writes the finished manifest. CUDA is
// not resumed here: CRIU still holds the processes frozen, and a driver call
// on a frozen process hangs; the caller resumes them once CRIU lets go.
// On failure the checkpoint stays unfinished, and the error says how to
// finish it (`cryo checkpoint --finish`).
func (o *Orchestrator) EndCheckpoint(ctx context.Context, t Target, imageDir string) (*manifest.Manifest, error) {
	return endCheckpoint(ctx, o.env(), t, imageDir)
}

// FinishCheckpoint completes the checkpoint in dir whose run was
// interrupted after CRIU's dump (see restoreCheck.interruptedAfterDump), under the
// directory's lock. It fails with manifest.ErrIncomplete when the dump
// itself did not complete, and says so when there was nothing to finish.
func (o *Orchestrator) FinishCheckpoint(ctx context.Context, dir string) (*manifest.Manifest, error) {
	return finishCheckpoint(ctx, o.env(), dir)
}

// CheckpointProcess checkpoints the process tree rooted at po.PID into
// po.Dir with CRIU, with cryo's CUDA orchestration around the dump.
//
// Stdio: a tree whose stdio is /dev/null, files or sockets it owns dumps and
// restores as is. A terminal needs ShellJob. A pipe to a process outside the
// tree (the shell that started it, `cmd | tee`) dumps, but the restore
// creates a fresh pipe whose other end nobody holds: writes to it then fail
// with EPIPE/SIGPIPE. Redirect such stdio to files first.
func (o *Orchestrator) CheckpointProcess(ctx context.Context, po ProcessOptions) (*manifest.Manifest, error) {
	return checkpointProcess(ctx, o.env(), po)
}

// RestoreDetached verifies the checkpoint in ro.Dir (manifest, digests, GPU
// host check), restores it with CRIU as a detached tree, and resumes its
// CUDA. The restored processes keep the pids they had, so those pids must
// be free: a tree checkpointed with LeaveRunning cannot be restored while
// the original still runs. On a CUDA resume failure it returns the result
// (the tree runs, with CUDA suspended) with the error.
func (o *Orchestrator) RestoreDetached(ctx context.Context, ro RestoreOptions) (*RestoreResult, error) {
	return (&bareRestore{e: o.env(), ro: ro, id: "checkpoint " + ro.Dir}).run(ctx)
}

// CheckRestore reads the manifest in imageDir, verifies the digests of the
// image files and checks that this host can take the checkpoint, all before
// anything is restored. On success the manifest carries the GPU pairs for
// ResumeRestored.
//
// A directory of CRIU images without a manifest was not taken by cryo. It
// is accepted as a checkpoint without CUDA (nil manifest, a warning logged)
// unless its images name libcuda.so: then the GPU state was not captured by
// cryo and a restore would fail in the application, so it is refused with
// ErrNoManifest. Errors are *StepError wrapping internal/manifest's sentinels.
//
// scope is which GPUs the restored processes may use: a container's, from
// its new spec (ScopeFromSpec), or the zero value for all of the host's.
func (o *Orchestrator) CheckRestore(ctx context.Context, id, imageDir string, scope GPUScope) (*manifest.Manifest, error) {
	return checkRestore(ctx, o.env(), id, imageDir, scope)
}

// Restore is the one restore sequence that follows CheckRestore, for every
// front end: the front end's restore as the restore step (with its events,
// its duration in m, and CRIU's cause on failure), then the CUDA resume of
// the restored processes. It returns the restored root's pid, and a
// *StepError naming the step that failed and what became of the processes.
func (o *Orchestrator) Restore(ctx context.Context, id string, m *manifest.Manifest, r Restorer) (int, error) {
	return runRestore(ctx, o.env(), id, m, r)
}

// ResumeRestored resumes CUDA in the restored processes of t. Their pids
// are not the manifest's (a container restores in a new pid namespace), so
// it asks the driver which of t's processes are checkpointed or locked and
// resumes those, remapping the GPUs by the pairs CheckRestore found. A
// checkpoint without CUDA (or without a manifest) needs nothing.
func (o *Orchestrator) ResumeRestored(ctx context.Context, t Target, m *manifest.Manifest) error {
	return resumeRestored(ctx, o.env(), t, m)
}

// ResumeCUDA resumes CUDA in pids after a dump that left them running:
// a leave-running checkpoint, and the CRIU action script's resume watcher.
func (o *Orchestrator) ResumeCUDA(ctx context.Context, pids []int) error {
	return o.env().gpu.resume(ctx, pids)
}

// Pause suspends the CUDA processes of t, then calls freeze (runc pause).
// With no CUDA process it only freezes, as runc would.
func (o *Orchestrator) Pause(ctx context.Context, t Target, freeze func(context.Context) error) error {
	return pauseTarget(ctx, o.env(), t, freeze)
}

// Resume calls thaw (runc resume), then resumes CUDA in the processes the
// pause suspended. Without a pause record it only thaws, as runc would.
//
// An interrupt does not stop a resume: it only gives back, and stopped
// between the thaw and the CUDA resume it would leave the container
// thawed with its processes held stopped.
func (o *Orchestrator) Resume(ctx context.Context, t Target, thaw func(context.Context) error) error {
	return (&pauseResume{e: o.env(), t: t}).run(ctx, thaw)
}

// GPUFreePause reports whether a pause of a container with these
// annotations suspends CUDA first: yes unless the configuration
// ($CRYO_GPU_FREE_PAUSE=0) or the annotation turns it off.
func (o *Orchestrator) GPUFreePause(annotations map[string]string) bool {
	if v, ok := annotations[AnnGPUFreePause]; ok {
		return v != "false" && v != "0"
	}
	return !o.Config.FreezeOnlyPause
}

// ForgetPause removes the pause record of a container that is deleted.
func (o *Orchestrator) ForgetPause(id string) { o.env().locks.pauses().remove(id) }

// HasPause reports whether id has a pause record, readable or not.
func (o *Orchestrator) HasPause(id string) bool { return o.env().locks.pauses().has(id) }

// Recover brings the tree rooted at pid back to running.
func (o *Orchestrator) Recover(ctx context.Context, pid int) (*RecoverResult, error) {
	return recoverTree(ctx, o.env(), pid)
}

// Hold is a front end's own hold point, op/s in the failpoint build's
// setting (failpoint_hold.go); a no-op in the shipped binary.
func (o *Orchestrator) Hold(op string, s StepName) { o.env().stepper.hold(op, s) }

// LockTarget locks the target id for op ("checkpoint", "restore"). A
// front end whose run spans several entry points (a restore: check, runc
// restore, CUDA resume) takes it first and hands it to each of them, as
// Target.Lock or Restorer.Lock: they use it instead of taking their own.
// It fails at once with a *lock.BusyError if another run holds it.
func (o *Orchestrator) LockTarget(op, id string) (*lock.Lock, error) {
	return o.env().locks.target(op, id)
}

// LockPIDs locks only pids, for a run on processes without a container
// (`cryo cuda suspend`): it collides with any checkpoint or restore that
// holds one of them.
func (o *Orchestrator) LockPIDs(op string, pids []int) (*lock.Lock, error) {
	return o.env().locks.pids(op, pids)
}
