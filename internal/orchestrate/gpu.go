package orchestrate

import (
	"context"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
)

// gpu is the driver as the sequences call it: with the lock timeout and
// the progress callback that the front end set.
type gpu struct {
	driver      *cuda.Driver
	lockTimeout time.Duration
	onProgress  func(cuda.Progress)
}

// opts are the driver's options for a suspend or resume, remapping the
// GPUs by pairs (nil: none).
func (g gpu) opts(pairs []cuda.GPUPair) cuda.SetOptions {
	return cuda.SetOptions{LockTimeout: g.lockTimeout, GPUPairs: pairs, OnProgress: g.onProgress}
}

// resume resumes CUDA in pids after a dump that left them running
// (Orchestrator.ResumeCUDA).
func (g gpu) resume(ctx context.Context, pids []int) error {
	// CRIU lets dumped processes go as it found them, held in their stop;
	// the stop shows once every thread has taken it again.
	cuda.AwaitHeld(pids, heldSettle)
	return g.driver.Resume(ctx, pids, g.opts(nil))
}
