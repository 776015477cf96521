// Package orchestrate is cryo's one checkpoint/restore orchestration. Every
// front end (the containerd shim, cryo-runc, the cryo CLI, the CRIU action
// script) calls it: it thaws the process set, suspends CUDA, writes the GPU
// manifest, calls the front end's dump (runc or CRIU), resumes or rolls back,
// and after a restore resumes CUDA in the restored processes. Checkpoint,
// pause and restore run as tables of steps on one runner (runner.go).
// Their prechecks (package precheck) refuse before anything is touched;
// the dump's preflight (preflight.go) refuses, once the processes are
// found, a set CRIU could not dump, before CUDA is suspended.
package orchestrate

import (
	"context"
	"log/slog"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/progress"
)

// Target is the process set a checkpoint or restore acts on.
type Target struct {
	ID   string                                   // container id (or "pid N"), used in messages
	PIDs func(ctx context.Context) ([]int, error) // the processes, host pids
	Thaw func(ctx context.Context) error          // unfreezes the cgroup; nil if never frozen
	// Scope and InitPID, for a restored container: the GPUs its spec gives
	// it, and its init process (whose root holds its /dev).
	Scope   GPUScope
	InitPID int
	// DumpLeavesStopped says that the dump leaves the processes stopped
	// instead of killing them (CRIU's leave_stopped): the orchestration
	// kills them once the checkpoint is complete and synced, and continues
	// them if anything fails before.
	DumpLeavesStopped bool
	// DumpFreezes says that the dump freezes the target's cgroup (runc
	// asks CRIU to): its CUDA processes, held stopped from their driver
	// checkpoint on, need a CRIU that seizes stopped tasks by interrupt
	// (checkSeizeStopped).
	DumpFreezes bool
	// CRIUWorkDir is where the dump writes CRIU's log and stats-dump when
	// that is not the image directory (runc's --work-path, as Podman gives
	// it): a later run needs them to tell a completed dump from a partial
	// one. Empty: the image directory.
	CRIUWorkDir string
	// PreCheckpoint, if set, is run before anything is suspended; its
	// failure ends the checkpoint with the processes untouched. Wake, if
	// set (the post-restore hook), is run after a leave-running
	// checkpoint, and after a failed checkpoint whose PreCheckpoint had
	// run, so that a server put to sleep wakes again.
	PreCheckpoint, Wake *Hook
	// Lock, if set, is the target's lock that the front end holds for a
	// run spanning several entry points (LockTarget): the run uses it and
	// leaves its release to the front end. Nil: the run takes its own.
	Lock *lock.Lock
}

// Event reports the start (Done false) and end of one step, for progress
// lines and logs.
type Event struct {
	ID      string
	Step    StepName
	Done    bool
	Elapsed time.Duration
	Err     error
}

// Orchestrator is cryo's one checkpoint/restore sequence. The zero value
// works: it uses the default configuration, a driver loading libcuda.so.1
// and slog.Default. Front ends pass the configuration they read (WithConfig).
type Orchestrator struct {
	// Config is the entry point's configuration: CRIU, the lock directory,
	// the GPU map and the digest mode are taken from it.
	Config config.Config
	Driver *cuda.Driver
	// Logger receives one line per step with its duration; nil: slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called at the start and end of every step.
	OnEvent func(Event)
	// OnCUDAProgress, if set, receives the driver's per-process progress.
	OnCUDAProgress func(cuda.Progress)
	// Progress, if set, draws the long steps (see WithProgress).
	Progress *progress.Renderer
	// LockTimeout is how long the driver waits for in-flight GPU work before
	// locking; zero: internal/cuda's default.
	LockTimeout time.Duration
	// GPUMap chooses the target GPU of a source GPU on restore (old UUID →
	// new UUID), overriding the automatic match; nil: Config.GPUMap, if set.
	GPUMap []cuda.GPUPair
	// AllowCUDAIPC checkpoints processes cryo otherwise refuses because
	// driver 580 cannot restore their GPU memory: NCCL ranks that may share
	// it through CUDA IPC, and JAX processes on several GPUs with XLA's
	// default allocator. For a job known to avoid both by means cryo
	// cannot see (variables set from inside the program), or a driver that
	// restores them.
	AllowCUDAIPC bool
	// FrontEnd is the tool the user came through, for the wording of the
	// remedies (see WithFrontEnd); every front end passes its words.
	FrontEnd FrontEnd

	// hashFiles, if set, takes the digests after a dump in place of
	// digest.FilesWith. No front end sets it: unit tests make it fail as
	// a failing disk would, which root cannot provoke with modes.
	hashFiles func(dir string, p digest.Progress) (map[string]string, error)
}

// hashImages hashes the image files in dir after the dump.
func (o *Orchestrator) hashImages(dir string, p digest.Progress) (map[string]string, error) {
	if o.hashFiles != nil {
		return o.hashFiles(dir, p)
	}
	return digest.FilesWith(dir, p)
}

// WithConfig configures the orchestration and its driver from c, as an
// entry point read it; options after it may override single settings.
func WithConfig(c config.Config) Option {
	return func(o *Orchestrator) {
		o.Config = c
		o.Driver = cuda.New(DriverOptions(c))
		o.AllowCUDAIPC = c.AllowCUDAIPC
	}
}

// DriverOptions are the driver settings of c: the libraries, the copy
// limit, and the environment of the driver's helper processes.
func DriverOptions(c config.Config) cuda.Options {
	return cuda.Options{LibPath: c.LibCUDA, NVMLPath: c.LibNVML, CopyTimeout: c.CopyTimeout, Env: c.Environ}
}

// WithAllowCUDAIPC sets AllowCUDAIPC.
func WithAllowCUDAIPC(allow bool) Option { return func(o *Orchestrator) { o.AllowCUDAIPC = allow } }

// Option configures an Orchestrator made by New.
type Option func(*Orchestrator)

// New returns an Orchestrator; without options it is the zero value.
func New(opts ...Option) *Orchestrator {
	o := &Orchestrator{}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// WithDriverOptions uses a driver made from opts; empty fields take
// internal/cuda's defaults.
func WithDriverOptions(opts cuda.Options) Option {
	return func(o *Orchestrator) { o.Driver = cuda.New(opts) }
}

// WithLogger routes the orchestration's log lines (the shim passes a
// handler over containerd's logger).
func WithLogger(l *slog.Logger) Option { return func(o *Orchestrator) { o.Logger = l } }

// WithEvents calls f at the start and end of every step.
func WithEvents(f func(Event)) Option { return func(o *Orchestrator) { o.OnEvent = f } }

// WithLockTimeout sets the driver's lock timeout.
func WithLockTimeout(d time.Duration) Option { return func(o *Orchestrator) { o.LockTimeout = d } }

// WithGPUMap restores each source GPU onto the GPU the map names.
func WithGPUMap(pairs []cuda.GPUPair) Option { return func(o *Orchestrator) { o.GPUMap = pairs } }

func (o *Orchestrator) driver() *cuda.Driver {
	if o.Driver == nil {
		o.Driver = cuda.New(cuda.Options{})
	}
	return o.Driver
}

// MsgStepFailed is the log message of a failed step: a front end that
// reports the returned error itself may drop it.
const MsgStepFailed = "cryo step failed"

func (o *Orchestrator) log() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

func (o *Orchestrator) setOptions(pairs []cuda.GPUPair) cuda.SetOptions {
	return cuda.SetOptions{LockTimeout: o.LockTimeout, GPUPairs: pairs, OnProgress: o.OnCUDAProgress}
}

// step runs fn as one named step: it emits the start and end events and
// draws its line (fn finds the line in its ctx, taskFrom), or, for a caller
// that takes neither, logs the duration; it returns the
// duration with fn's error. (A front end with events reports the steps its
// own way, and its logger carries the warnings alone.)
func (o *Orchestrator) step(ctx context.Context, id string, s StepName, fn func(context.Context) error) (time.Duration, error) {
	o.emit(Event{ID: id, Step: s})
	t := o.startTask(id, s)
	start := time.Now()
	err := fn(withTask(ctx, t))
	d := time.Since(start)
	t.End(endErr(ctx, err))
	o.emit(Event{ID: id, Step: s, Done: true, Elapsed: d, Err: err})
	switch {
	case o.OnEvent != nil || o.Progress != nil:
	case err != nil:
		o.log().Warn(MsgStepFailed, "id", id, "step", string(s), "elapsed", d, "error", err)
	default:
		o.log().Info("cryo step done", "id", id, "step", string(s), "elapsed", d)
	}
	return d, err
}

func (o *Orchestrator) emit(e Event) {
	if o.OnEvent != nil {
		o.OnEvent(e)
	}
}

// ResumeCUDA resumes CUDA in pids after a dump that left them running:
// a leave-running checkpoint, and the CRIU action script's resume watcher.
func (o *Orchestrator) ResumeCUDA(ctx context.Context, pids []int) error {
	// CRIU lets dumped processes go as it found them, held in their stop;
	// the stop shows once every thread has taken it again.
	cuda.AwaitHeld(pids, heldSettle)
	return o.driver().Resume(ctx, pids, o.setOptions(nil))
}
