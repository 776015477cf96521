// Package orchestrate is cryo's one checkpoint/restore orchestration. Every
// front end (the containerd shim, cryo-runc, the cryo CLI, the CRIU action
// script) calls it: it thaws the process set, suspends CUDA, writes the GPU
// manifest, calls the front end's dump (runc or CRIU), resumes or rolls back,
// and after a restore resumes CUDA in the restored processes. Checkpoint,
// pause and restore run as tables of steps on one runner (runner.go).
// Their prechecks (package precheck) refuse before anything is touched;
// the dump's preflight (preflight.go) refuses, once the processes are
// found, a set CRIU could not dump, before CUDA is suspended. The
// Orchestrator's methods are only the entry points (entry.go): each hands
// the sequence it calls an env (env.go), the settings and parts the
// sequence uses, as a value.
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
	// (criuCheck.seizeStopped).
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

// driver is o's driver, one with internal/cuda's defaults for the zero
// value, made once and kept: tests ask it of the processes after a run.
func (o *Orchestrator) driver() *cuda.Driver {
	if o.Driver == nil {
		o.Driver = cuda.New(cuda.Options{})
	}
	return o.Driver
}

// MsgStepFailed is the log message of a failed step: a front end that
// reports the returned error itself may drop it.
const MsgStepFailed = "cryo step failed"

// env is what the sequences of one call run with, taken from o as the
// entry point is called: the driver made, the logger and the lock
// directory defaulted.
func (o *Orchestrator) env() env {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	hash := o.hashFiles
	if hash == nil {
		hash = digest.FilesWith
	}
	g := gpu{driver: o.driver(), lockTimeout: o.LockTimeout, onProgress: o.OnCUDAProgress}
	return env{cfg: o.Config, log: log, gpu: g, front: o.FrontEnd, allowIPC: o.AllowCUDAIPC, hash: hash,
		stepper: stepper{log: log, onEvent: o.OnEvent, progress: o.Progress, environ: o.Config.Environ},
		locks:   locker{dir: lockDir(o.Config), log: log},
		criu:    criuCheck{binary: o.Config.CRIU, log: log},
		host:    hostCheck{driver: g.driver, log: log, pairs: o.GPUMap, spec: o.Config.GPUMap},
	}
}
