package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/fixup"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// checkHost matches the manifest's processes to the GPUs of scope on this
// host. A deferred scope is only checked for the driver here; its pairs are
// found after the restore (see ResumeRestored).
func (o *Orchestrator) checkHost(ctx context.Context, m *manifest.Manifest, scope GPUScope) (map[int][]cuda.GPUPair, error) {
	if len(m.Needs) == 0 {
		if m.HasCUDA() {
			// manifest.Read refuses such a manifest; a caller that built
			// one must not get a restore with no host check at all.
			return nil, fmt.Errorf("the manifest lists CUDA processes but no GPU needs: %w", manifest.ErrManifestInconsistent)
		}
		return nil, nil
	}
	host, err := o.driver().Inventory(ctx)
	if err != nil {
		host = cuda.Inventory{} // no driver, no NVML: the host offers no GPU
		o.log().Warn("GPU inventory unavailable on this host", "error", err)
	}
	if scope.Deferred {
		scope = GPUScope{}
	}
	targets, err := scope.Targets(host)
	if err != nil {
		return nil, err
	}
	user, err := o.gpuMap()
	if err != nil {
		return nil, err
	}
	return manifest.CheckHost(m, host, targets, user)
}

func restoreRemedy(err error, dir string) string {
	switch {
	case errors.Is(err, manifest.ErrNotCheckpoint):
		return "pass the directory that `cryo checkpoint --dir` wrote (it holds inventory.img and " + manifest.ManifestName + ")"
	case errors.Is(err, manifest.ErrNoManifest):
		return "re-take the checkpoint through cryo (cryo-runc, the cryo shim, or `cryo checkpoint`), which suspends CUDA first and writes the manifest"
	case errors.Is(err, cuda.ErrNoMatchingGPU) && strings.Contains(err.Error(), "the GPU map"):
		return gpuMapRemedy(err)
	case errors.Is(err, manifest.ErrIncompatibleHost):
		return "restore on a host with the GPUs and driver above, or free GPU memory"
	case errors.Is(err, manifest.ErrCorrupt), errors.Is(err, manifest.ErrUnsupportedVersion), errors.Is(err, manifest.ErrPartial):
		return "" // their messages carry the remedy
	}
	return "check that " + dir + " is readable"
}

// gpuMapRemedy answers a GPU map that the matcher refused: the host is
// not at fault, the map is (internal/cuda's matcher names the map in its message).
func gpuMapRemedy(err error) string {
	if strings.Contains(err.Error(), "will not see") {
		return "that GPU is not one the process can see after the restore (its CUDA_VISIBLE_DEVICES picks among this host's GPUs): map the GPU onto one that it sees (`cryo inspect` shows its CUDA_VISIBLE_DEVICES, `nvidia-smi -L` the host's UUIDs), or leave that pair out of --gpu-map ($CRYO_GPU_MAP) and cryo picks one"
	}
	return "correct --gpu-map ($CRYO_GPU_MAP): map each GPU the checkpoint used (`cryo inspect` lists them) onto a GPU of the same model that this host has (`nvidia-smi -L`), each at most once"
}

// ResumeRestored resumes CUDA in the restored processes of t. Their pids
// are not the manifest's (a container restores in a new pid namespace), so
// it asks the driver which of t's processes are checkpointed or locked and
// resumes those, remapping the GPUs by the pairs CheckRestore found. A
// checkpoint without CUDA (or without a manifest) needs nothing.
func (o *Orchestrator) ResumeRestored(ctx context.Context, t Target, m *manifest.Manifest) error {
	fixup.UpLoopback(o.log(), t.ID, t.InitPID)
	resume := func(ctx context.Context, l *lock.Lock) error { return o.resumeRestored(ctx, t, m, l) }
	if !m.HasCUDA() {
		suspended := o.unlistedSuspended(ctx, t)
		if len(suspended) == 0 {
			return nil // no suspended CUDA process: a CPU checkpoint, as the manifest says
		}
		resume = func(ctx context.Context, l *lock.Lock) error { return o.resumeUnlisted(ctx, t, l, suspended) }
	}
	l, release, err := o.lockFor(t.Lock, "restore", t.ID)
	if err != nil {
		return o.lockError("restore", t.ID, err)
	}
	defer release()
	seq := &runner{o: o, op: "restore", id: t.ID, steps: []step{
		{name: StepResume, do: func(ctx context.Context) error { return resume(ctx, l) }},
	},
		// Only a manifest that lists CUDA processes times their resume.
		record: func(s StepName, d time.Duration, _ error) {
			if m.HasCUDA() {
				m.RestoreSteps = append(m.RestoreSteps, manifest.Step{Name: string(s), Seconds: d.Seconds()})
			}
		},
		failed: func(ctx context.Context, _ StepName, err error, _ string) error {
			return resumeError(context.WithoutCancel(ctx), t, err)
		},
	}
	return seq.run(ctx)
}

func (o *Orchestrator) resumeRestored(ctx context.Context, t Target, m *manifest.Manifest, l *lock.Lock) error {
	if all, err := t.PIDs(ctx); err == nil {
		cuda.AwaitHeld(all, heldSettle)
	}
	pids, procs, _, err := o.findCUDA(ctx, t)
	if err != nil {
		return err
	}
	if err := l.AddPIDs(pids); err != nil {
		return err
	}
	var suspended []int
	for _, p := range procs {
		if p.State == cuda.StateCheckpointed || p.State == cuda.StateLocked {
			suspended = append(suspended, p.PID)
		}
	}
	if len(suspended) == 0 && len(procs) > 0 {
		// Something else (a CRIU action script) resumed them already.
		o.log().Info("restored CUDA processes already running", "id", t.ID, "pids", pids)
		return nil
	}
	if len(suspended) == 0 {
		return fmt.Errorf("none of the restored processes %v is a CUDA process, but the manifest lists %d: %w", pids, len(m.Processes), cuda.ErrBadState)
	}
	fixup.JoinSpecCgroup(o.log(), t.ID, t.Scope.Cgroup, pids)
	if err := o.prepareNodes(t); err != nil {
		return err
	}
	opts := o.setOptions(nil)
	if opts.PIDPairs, err = o.restorePairs(ctx, t, m, suspended); err != nil {
		return err
	}
	line := taskFrom(ctx)
	line.SetTotal(allGPUBytes(m))
	if rate := recordedCopyRate(m); rate > 0 {
		line.SetRate(rate)
	}
	return o.driver().Resume(ctx, suspended, opts)
}

// heldSettle bounds the wait for restored CUDA processes to show the stop
// they were dumped in (cuda.AwaitHeld).
const heldSettle = 2 * time.Second

// unlistedSuspended are the restored processes whose CUDA state is
// suspended although the manifest lists none (a checkpoint of another
// tool, or an altered manifest): left so, they would hang at their next
// CUDA call while the restore reported success. It warns of their resume.
func (o *Orchestrator) unlistedSuspended(ctx context.Context, t Target) []int {
	_, procs, _, err := o.findCUDA(ctx, t)
	if err != nil || len(procs) == 0 {
		return nil // no CUDA process: a CPU checkpoint, as the manifest says
	}
	var suspended []int
	for _, p := range procs {
		if p.State == cuda.StateCheckpointed || p.State == cuda.StateLocked {
			suspended = append(suspended, p.PID)
		}
	}
	if len(suspended) > 0 {
		o.log().Warn("restored processes hold suspended CUDA state that the checkpoint's manifest does not list: resuming them on the GPUs they had", "id", t.ID, "pids", suspended)
	}
	return suspended
}

// resumeUnlisted resumes the unlisted suspended processes on the GPUs they
// had.
func (o *Orchestrator) resumeUnlisted(ctx context.Context, t Target, l *lock.Lock, suspended []int) error {
	if err := l.AddPIDs(suspended); err != nil {
		return err
	}
	if err := o.prepareNodes(t); err != nil {
		return err
	}
	return o.driver().Resume(ctx, suspended, o.setOptions(nil))
}

// prepareNodes gives a restored container the GPU device nodes of its
// spec before the driver opens them.
func (o *Orchestrator) prepareNodes(t Target) error {
	if len(t.Scope.Nodes) == 0 || t.InitPID <= 0 {
		return nil
	}
	return fixup.SyncNodes(t.InitPID, t.Scope.Nodes)
}

// restorePairs finds each restored process's GPU pairs by its NSPID (the
// pid it had in its container at checkpoint, which CRIU restores).
func (o *Orchestrator) restorePairs(ctx context.Context, t Target, m *manifest.Manifest, pids []int) (map[int][]cuda.GPUPair, error) {
	if m.RestorePairs == nil || t.Scope.Deferred {
		scope := t.Scope
		if scope.Deferred && t.InitPID > 0 {
			scope = ScopeFromRoot(t.InitPID)
		}
		var err error
		if m.RestorePairs, err = o.checkHost(ctx, m, scope); err != nil {
			return nil, err
		}
	}
	out := map[int][]cuda.GPUPair{}
	for _, pid := range pids {
		pairs, ok := m.PairsFor(cuda.NSPID(pid))
		if !ok && m.PerProcess() {
			return nil, fmt.Errorf("restored process %d (pid %d in its container) is not one the checkpoint recorded: %w", pid, cuda.NSPID(pid), cuda.ErrBadState)
		}
		out[pid] = pairs
	}
	return out, nil
}

// resumeError is a failed CUDA resume after a restore: the processes are
// held stopped, suspended, and the user can retry the resume. The outcome
// says what they are now, checked, not what they should be.
func resumeError(ctx context.Context, t Target, err error) error {
	outcome := "the restored processes are held stopped, with CUDA still suspended"
	if pids, perr := t.PIDs(ctx); perr == nil {
		outcome = "after the restore, " + procsNow(pids)
	}
	return &report.StepError{Op: "restore", ID: t.ID, Step: StepResume, Err: err,
		Outcome: outcome,
		Remedy:  "run `cryo recover PID` (see `cryo cuda state PID`), or kill them and restore again"}
}
