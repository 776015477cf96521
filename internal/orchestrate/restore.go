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
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

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
	var m *manifest.Manifest
	seq := &runner{o: o, op: "restore", id: id, steps: o.checkRestoreTable(id, imageDir, scope, &m),
		// The manifest is there from the verify step on; of this check it
		// records that step alone, as the restore's first.
		record: func(s StepName, d time.Duration, err error) {
			if s == StepVerify && err == nil && m != nil {
				m.RestoreSteps = append(m.RestoreSteps, manifest.Step{Name: string(s), Seconds: d.Seconds()})
			}
		},
		// Nothing is touched before the restore step: an interrupt stops it
		// between steps, and one during the verify step is named as such,
		// not as the host check it cut short.
		interruptible: true,
		failed: func(ctx context.Context, s StepName, err error, _ string) error {
			if interrupted(ctx) {
				return interruptedRestore(ctx, id, s, "nothing was restored")
			}
			if d, ok := RestoreDeadline(ctx); ok && PastDeadline(ctx, err) {
				return &report.StepError{Op: "restore", ID: id, Step: string(s), Err: DeadlineExceededIn("check", d.Limit, err),
					Outcome: "nothing was restored", Remedy: RestoreDeadlineRemedy}
			}
			return checkRestoreError(id, imageDir, s, err)
		},
	}
	if err := seq.run(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// checkRestoreTable is CheckRestore's table; the verify step sets *m.
func (o *Orchestrator) checkRestoreTable(id, imageDir string, scope GPUScope, m **manifest.Manifest) []step {
	return []step{
		o.completeStep(id, imageDir),
		{name: StepVerify, do: func(ctx context.Context) error {
			var err error
			*m, err = o.verify(ctx, id, imageDir, scope)
			return err
		}},
		confineStep(imageDir, scope),
		o.hostPortsStep(id, imageDir, scope),
	}
}

// completeStep completes a checkpoint whose run was interrupted after
// CRIU's dump (interruptedAfterDump), before it is verified; skipped for
// any other.
func (o *Orchestrator) completeStep(id, dir string) step {
	var m *manifest.Manifest
	return step{name: StepComplete,
		skip: func() bool {
			var ok bool
			m, ok = o.interruptedAfterDump(id, dir)
			return !ok
		},
		do: func(context.Context) error { return manifest.Complete(dir, m, digest.RecordsFrom(o.Config)) }}
}

// hostPortsStep is the ports step (portsStep) for a restore into the
// host's network namespace; skipped for any other.
func (o *Orchestrator) hostPortsStep(id, dir string, scope GPUScope) step {
	s := o.portsStep(id, dir)
	if !scope.HostNetwork {
		s.skip = func() bool { return true }
	}
	return s
}

// checkRestoreError is the error of CheckRestore's failed step s: nothing
// was restored.
func checkRestoreError(id, dir string, s StepName, err error) error {
	switch s {
	case StepComplete:
		return &report.StepError{Op: "restore", ID: id, Step: StepComplete, Err: err, Outcome: "nothing was restored",
			Remedy: "free space in " + dir + " or make it writable, then retry (or run `cryo checkpoint --finish " + dir + "`)"}
	case StepConfine:
		return confineError(id, err)
	}
	// The verify step's (the ports step does not fail).
	return &report.StepError{Op: "restore", ID: id, Step: StepVerify, Err: err, Outcome: "nothing was restored", Remedy: restoreRemedy(err, dir)}
}

func (o *Orchestrator) verify(ctx context.Context, id, dir string, scope GPUScope) (*manifest.Manifest, error) {
	if err := manifest.CheckPartial(dir); err != nil {
		return nil, err
	}
	if ok, err := manifest.IsImageDir(dir); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%s holds no CRIU images (no inventory.img): %w", dir, manifest.ErrNotCheckpoint)
	}
	m, err := manifest.Read(dir)
	if errors.Is(err, manifest.ErrNoManifest) {
		return nil, o.noManifest(id, dir, scope, err)
	}
	if err != nil {
		return nil, err
	}
	stamped, err := digest.RecordsFrom(o.Config).VerifyStampedWith(dir, m.Digests, taskFrom(ctx))
	if err != nil {
		return nil, err
	}
	if stamped {
		o.log().Info("image files unchanged since cryo hashed them on this host: not hashed again (CRYO_VERIFY=full to hash them)", "id", id, "dir", dir)
	}
	if m.HasCUDA() || len(m.Needs) > 0 {
		if m.RestorePairs, err = o.checkHost(ctx, m, scope); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// noManifest refuses a manifest-less CRIU directory for a container: the
// manifest is what carries the digests and the GPU needs, so without it
// nothing of the images could be checked, and a container's restore (the
// shim, cryo-runc, an image) has no reason to take images cryo did not
// write. A bare tree (`cryo restore --dir`) may still restore a plain
// `criu dump` directory as a CPU checkpoint, unverified, unless its images
// show a CUDA library.
func (o *Orchestrator) noManifest(id, dir string, scope GPUScope, err error) error {
	if scope.Container || scope.Deferred {
		return fmt.Errorf("%s holds CRIU images that cryo did not take (%w): a container restores only a checkpoint with cryo's manifest, which carries the digests of its files and the GPUs it needs", dir, err)
	}
	cuda, rerr := manifest.ReferencesCUDA(dir)
	if rerr != nil {
		return rerr
	}
	if cuda {
		return fmt.Errorf("the CRIU images in %s map libcuda.so but %w: the GPU state was not saved by cryo", dir, err)
	}
	o.log().Warn("checkpoint has no cryo manifest: restoring it as a checkpoint without CUDA, unverified", "id", id, "dir", dir)
	return nil
}

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
