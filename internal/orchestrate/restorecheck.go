package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// checkRestore is one CheckRestore.
func checkRestore(ctx context.Context, e env, id, imageDir string, scope GPUScope) (*manifest.Manifest, error) {
	c := &restoreCheck{e: e, id: id, dir: imageDir, scope: scope, ports: &portsWait{id: id, dir: imageDir}}
	c.read()
	if err := c.runner().run(ctx); err != nil {
		return nil, err
	}
	return c.verified, nil
}

// restoreCheck is one run of CheckRestore. What its steps' skips ask is
// read before the steps run (read, and the ports' probe at the end of the
// verify step): a skip only looks at this value.
type restoreCheck struct {
	e     env
	id    string
	dir   string
	scope GPUScope

	// m is the manifest in dir, read once (read), with readErr; the
	// completion step completes it in place.
	m       *manifest.Manifest
	readErr error
	// unfinished: the checkpoint's run was interrupted after CRIU's dump
	// completed, and the completion step completes it first.
	unfinished bool
	ports      *portsWait
	verified   *manifest.Manifest // what the verify step found: nil for a manifest-less CPU checkpoint
}

// read reads the manifest once, and whether it must be completed first
// (interruptedAfterDump).
func (c *restoreCheck) read() {
	c.m, c.readErr = manifest.Read(c.dir)
	c.unfinished = c.interruptedAfterDump()
}

// interruptedAfterDump says whether, before a restore verifies it, the
// checkpoint in dir must be completed: its run stopped after CRIU's dump
// had completed (cryo killed while it hashed, a full disk at its last
// write, cryo-runc killed under Podman), so the processes may be gone and
// the images are whole, and refusing it would lose the workload for good.
// It asks the manifest as read once (read), and warns of the completion
// to come. Anything else (no manifest, digests already there, a partial
// dump) is left for verify to judge.
func (c *restoreCheck) interruptedAfterDump() bool {
	m, err, dir := c.m, c.readErr, c.dir
	if err != nil || !m.Unfinished() {
		return false
	}
	if ok, err := manifest.DumpCompleted(dir, m); err != nil || !ok {
		return false
	}
	c.e.log.Warn("checkpoint interrupted after CRIU's dump completed: completing it now; its files are hashed as they are now, not as CRIU wrote them", "id", c.id, "dir", dir)
	return true
}

// runner is the check's step runner.
func (c *restoreCheck) runner() *runner {
	return &runner{stepper: c.e.stepper, op: "restore", id: c.id, steps: c.table(),
		// The manifest is there from the verify step on; of this check it
		// records that step alone, as the restore's first.
		record: func(s StepName, d time.Duration, err error) {
			if s == StepVerify && err == nil && c.verified != nil {
				c.verified.RestoreSteps = append(c.verified.RestoreSteps, manifest.Step{Name: string(s), Seconds: d.Seconds()})
			}
		},
		// Nothing is touched before the restore step: an interrupt stops it
		// between steps, and one during the verify step is named as such,
		// not as the host check it cut short.
		interruptible: true,
		failed:        c.failed,
	}
}

// table is CheckRestore's table.
func (c *restoreCheck) table() []step {
	return []step{
		// Completes a checkpoint whose run was interrupted after CRIU's
		// dump (interruptedAfterDump), before it is verified; skipped for
		// any other.
		{name: StepComplete, skip: func() bool { return !c.unfinished },
			do: func(context.Context) error { return manifest.Complete(c.dir, c.m, digest.RecordsFrom(c.e.cfg)) }},
		{name: StepVerify, do: c.verifyStep},
		confineStep(c.dir, c.scope),
		c.hostPortsStep(),
	}
}

// verifyStep verifies the checkpoint, then, for a restore into the host's
// network namespace, probes the ports that the next step waits for.
func (c *restoreCheck) verifyStep(ctx context.Context) error {
	m, err := c.verify(ctx)
	if err != nil {
		return err
	}
	c.verified = m
	if c.scope.HostNetwork {
		c.ports.probe(c.e.log)
	}
	return nil
}

// hostPortsStep is the ports step (portsWait) for a restore into the
// host's network namespace; skipped for any other.
func (c *restoreCheck) hostPortsStep() step {
	s := c.ports.step()
	if !c.scope.HostNetwork {
		s.skip = func() bool { return true }
	}
	return s
}

// failed is the error of the check's failed step s: nothing was restored.
func (c *restoreCheck) failed(ctx context.Context, s StepName, err error, _ string) error {
	if interrupted(ctx) {
		return interruptedRestore(ctx, c.id, s, "nothing was restored")
	}
	if d, ok := RestoreDeadline(ctx); ok && PastDeadline(ctx, err) {
		return &report.StepError{Op: "restore", ID: c.id, Step: string(s), Err: DeadlineExceededIn("check", d.Limit, err),
			Outcome: "nothing was restored", Remedy: RestoreDeadlineRemedy}
	}
	return checkRestoreError(c.id, c.dir, s, err)
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

// verify checks the checkpoint and its manifest, as read before the steps
// (and completed since, if it had to be), and this host against it.
func (c *restoreCheck) verify(ctx context.Context) (*manifest.Manifest, error) {
	e, id, dir := c.e, c.id, c.dir
	if err := manifest.CheckPartial(dir); err != nil {
		return nil, err
	}
	if ok, err := manifest.IsImageDir(dir); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%s holds no CRIU images (no inventory.img): %w", dir, manifest.ErrNotCheckpoint)
	}
	m, err := c.m, c.readErr
	if errors.Is(err, manifest.ErrNoManifest) {
		return nil, c.noManifest(err)
	}
	if err != nil {
		return nil, err
	}
	stamped, err := digest.RecordsFrom(e.cfg).VerifyStampedWith(dir, m.Digests, taskFrom(ctx))
	if err != nil {
		return nil, err
	}
	if stamped {
		e.log.Info("image files unchanged since cryo hashed them on this host: not hashed again (CRYO_VERIFY=full to hash them)", "id", id, "dir", dir)
	}
	if m.HasCUDA() || len(m.Needs) > 0 {
		if m.RestorePairs, err = e.host.check(ctx, m, c.scope); err != nil {
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
func (c *restoreCheck) noManifest(err error) error {
	if c.scope.Container || c.scope.Deferred {
		return fmt.Errorf("%s holds CRIU images that cryo did not take (%w): a container restores only a checkpoint with cryo's manifest, which carries the digests of its files and the GPUs it needs", c.dir, err)
	}
	cuda, rerr := manifest.ReferencesCUDA(c.dir)
	if rerr != nil {
		return rerr
	}
	if cuda {
		return fmt.Errorf("the CRIU images in %s map libcuda.so but %w: the GPU state was not saved by cryo", c.dir, err)
	}
	c.e.log.Warn("checkpoint has no cryo manifest: restoring it as a checkpoint without CUDA, unverified", "id", c.id, "dir", c.dir)
	return nil
}
