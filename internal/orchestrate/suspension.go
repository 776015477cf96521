package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
)

// suspension is what a run that suspends CUDA found of its target and did
// to it: the processes, the CUDA ones it suspends, the GPU-free pause
// that suspended others, and the runner whose completed steps say what is
// done. The checkpoint and the pause are each a sequence of their own
// over one; what it gives back on a failure is its undo's
// (suspensionUndo).
type suspension struct {
	e         env
	t         Target
	m         *manifest.Manifest
	r         *runner      // the run's steps: what is done
	lock      *lock.Lock   // held for the whole run: no other run touches the target meanwhile
	pids      []int        // the target's processes
	toSuspend []int        // CUDA processes found running, suspended by us
	paused    *pauseRecord // the GPU-free pause that suspended some of them, if any
	// pausedBefore: a GPU-free pause holds the target (its record was
	// there when the run began), which ran the pre-checkpoint hook.
	pausedBefore bool
	rate         float64 // bytes/s of this run's CUDA suspend, for the resume's ETA
}

// suspended: CUDA is suspended by this run, and no resume step brought it
// back: a failure must resume it.
func (s *suspension) suspended() bool { return suspendedIn(s.r) }

// suspendedIn: the run of r suspended CUDA, and no resume step brought it
// back.
func suspendedIn(r *runner) bool { return r.Done(StepSuspend) && !r.Done(StepResume) }

// noCUDA: this run suspends no CUDA process, so it has none to resume.
func (s *suspension) noCUDA() bool { return len(s.toSuspend) == 0 }

// findWith is find with its own check of the processes found (nil: none).
// Find asks the driver only about processes that map libcuda or hold
// /dev/nvidia*, so a CPU-only target works on a host without a driver.
func (s *suspension) findWith(ctx context.Context, check func(pids []int) error) error {
	pids, procs, skipped, err := s.e.gpu.find(ctx, s.t)
	if err != nil {
		return err
	}
	s.pids = pids
	// The tree may have grown since takeLock listed it.
	if err := s.lock.AddPIDs(pids); err != nil {
		return err
	}
	if check != nil {
		if err := check(pids); err != nil {
			return err
		}
	}
	return s.classifyFound(procs, skipped)
}

// classifyFound classifies procs, with the pause record of the target if a
// GPU-free pause suspended some of them.
func (s *suspension) classifyFound(procs []cuda.Process, skipped []cuda.Skipped) error {
	for _, sk := range skipped {
		s.e.log.Debug("not a CUDA process", "id", s.t.ID, "pid", sk.PID, "reason", sk.Reason)
	}
	var err error
	if s.paused, err = s.e.locks.pauses().read(s.t.ID); err != nil {
		s.e.log.Warn("pause record unreadable: processes suspended by a pause are dumped as if the user had suspended them", "id", s.t.ID, "error", err)
	}
	return s.classify(procs)
}

// classify records every CUDA process in the manifest and picks the running
// ones to suspend. One already checkpointed was suspended by the user
// (`cryo cuda suspend`): no other cryo run can hold it while we hold the
// lock. It is dumped as it is and left suspended for its owner to resume
// (see StillSuspended). A locked or failed one cannot be dumped safely.
func (s *suspension) classify(procs []cuda.Process) error {
	for _, p := range procs {
		switch p.State {
		case cuda.StateRunning:
			s.toSuspend = append(s.toSuspend, p.PID)
		case cuda.StateCheckpointed:
			if _, ok := s.paused.owns(p.PID); ok {
				// The pause that suspended it resumes it: not this run's.
				s.e.log.Info("CUDA process suspended by a GPU-free pause: dumped as it is, the resume brings it back", "id", s.t.ID, "pid", p.PID)
				break
			}
			s.e.log.Warn("CUDA process suspended before this checkpoint: dumped as it is, and left suspended", "id", s.t.ID, "pid", p.PID)
		default:
			return fmt.Errorf("CUDA process %d is %s (a driver call of another tool is under way, or one was interrupted): %w; run `cryo cuda state %d`, and `cryo recover %d` once nothing else checkpoints it", p.PID, p.State, cuda.ErrBadState, p.PID, p.PID)
		}
		s.m.Processes = append(s.m.Processes, manifest.Process{PID: p.PID, State: p.State.String()})
	}
	return nil
}

// inventory records the GPUs while the processes still hold their memory,
// and which GPUs each process sees and holds memory on: that is what a
// restore must give back. It refuses, before anything is suspended, what
// the driver would lose: NCCL ranks that share GPU memory, JAX processes
// on several GPUs, and a process whose CUDA_VISIBLE_DEVICES selects fewer
// GPUs than it holds (no restore would match it).
func (s *suspension) takeInventory(ctx context.Context) error {
	inv, err := s.e.gpu.driver.Inventory(ctx)
	if err != nil {
		// The checkpoint is still good; only the restore's host check loses
		// its data, so warn instead of failing.
		s.e.log.Warn("GPU inventory unavailable: the restore cannot check the target host", "id", s.t.ID, "error", err)
	}
	views, err := s.describe(inv)
	if err != nil {
		return err
	}
	if !s.e.allowIPC {
		if err := errors.Join(cuda.CheckIPC(views), cuda.CheckXLA(views, inv)); err != nil {
			return err
		}
	}
	s.m.Inventory = inv
	for i, v := range views {
		if rec, ok := s.paused.owns(s.m.Processes[i].PID); ok && s.m.Processes[i].State == cuda.StateCheckpointed.String() {
			// Suspended by a pause: its GPUs and memory are what the
			// pause's inventory saw, before the suspend freed them.
			rec.State, rec.Paused = s.m.Processes[i].State, true
			s.m.Processes[i] = rec
			continue
		}
		s.m.Processes[i].NSPID, s.m.Processes[i].GPUs, s.m.Processes[i].Evidence = v.NSPID, v.GPUs, v.Evidence
		s.m.Processes[i].VisibleDevices, s.m.Processes[i].NCCL = &v.VisibleDevices, v.NCCL
		for _, g := range v.GPUs {
			s.m.Processes[i].GPUMemory += g.Memory
		}
	}
	s.m.Needs = manifest.NeedsFromProcesses(s.m.Processes)
	// What no restore could give back is refused whatever the flags say:
	// checked on what the manifest records, which for a process a GPU-free
	// pause suspended is what it held before that suspend.
	if err := cuda.CheckVisible(recordedGPUs(s.m.Processes), inv); err != nil {
		return err
	}
	return nil
}

// describe learns each CUDA process's GPUs, in manifest order.
func (s *suspension) describe(inv cuda.Inventory) ([]cuda.ProcessGPUs, error) {
	views := make([]cuda.ProcessGPUs, 0, len(s.m.Processes))
	for _, p := range s.m.Processes {
		if _, ok := s.paused.owns(p.PID); ok && p.State == cuda.StateCheckpointed.String() {
			views = append(views, cuda.ProcessGPUs{}) // the pause's record has it
			continue
		}
		v, err := inv.Describe(p.PID)
		if err != nil {
			return nil, fmt.Errorf("which GPUs pid %d uses: %w", p.PID, err)
		}
		if len(v.GPUs) == 0 && len(inv.GPUs) > 0 {
			s.e.log.Warn("no GPU found for a CUDA process: the restore cannot check its GPUs", "id", s.t.ID, "pid", p.PID, "evidence", v.Evidence)
		}
		views = append(views, v)
	}
	return views, nil
}

func (s *suspension) suspend(ctx context.Context) error {
	if len(s.toSuspend) == 0 {
		return nil
	}
	if s.t.DumpFreezes {
		if err := s.e.criu.seizeStopped(ctx); err != nil {
			return err
		}
	}
	bytes := gpuBytes(s.m, s.toSuspend)
	taskFrom(ctx).SetTotal(bytes)
	start := time.Now()
	// internal/cuda rolls back the processes it already suspended when one fails,
	// so a failure here leaves nothing suspended.
	if err := s.e.gpu.driver.Suspend(ctx, s.toSuspend, s.e.gpu.opts(nil)); err != nil {
		return err
	}
	s.rate = measuredRate(bytes, time.Since(start))
	return nil
}

// copyLine gives the line of a resume or rollback the GPU memory it copies
// back to pids (as m records it) and the rate of the run's suspend.
func copyLine(ctx context.Context, m *manifest.Manifest, pids []int, rate float64) {
	t := taskFrom(ctx)
	t.SetTotal(gpuBytes(m, pids))
	if rate > 0 {
		t.SetRate(rate)
	}
}
