package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/cryo-gpu/cryo/internal/manifest"
)

// A dump that leaves the tree stopped (Target.DumpLeavesStopped) keeps the
// processes until the checkpoint is durable: they are killed only after the
// digests and the manifest are synced, and continued when anything before
// that fails. Durable before destructive.

// stoppedAfterDump reports whether the dumped processes wait, stopped, for
// this run to kill or continue them.
func (c *checkpoint) stoppedAfterDump() bool {
	return c.dumped() && !c.leaveRunning && c.t.DumpLeavesStopped
}

// killStopped ends the dumped tree once the checkpoint is complete. Only
// the dumped tree is signalled; the processes' parents reap them.
func (c *checkpoint) killStopped(ctx context.Context) {
	if !c.stoppedAfterDump() {
		return
	}
	for _, pid := range c.stoppedTree(ctx) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			c.o.log().Warn("could not kill a dumped process", "id", c.t.ID, "pid", pid, "error", err)
		}
	}
}

// continueStopped gives the stopped tree back after a failure that came
// after the dump: CUDA resumed first, as any rollback does (each CUDA
// process runs again only once its GPU state is back: internal/cuda releases it),
// then SIGCONT to the rest of the tree. It returns the outcome for the
// error.
func (c *checkpoint) continueStopped(ctx context.Context) string {
	outcome := "the processes were left running, CUDA untouched"
	if c.suspended() {
		outcome = c.rollback(ctx)
	}
	var failed []int
	for _, pid := range c.stoppedTree(ctx) {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			failed = append(failed, pid)
		}
	}
	// The processes run on from the dumped state, so the images are stale
	// (their files move on): a restore must not complete them later (see
	// manifest.DumpCompleted). Removing a file works on a full disk too.
	if err := manifest.AbandonDump(c.dir); err != nil {
		c.o.log().Warn("could not mark the abandoned dump", "id", c.t.ID, "dir", c.dir, "error", err)
	}
	if len(failed) > 0 {
		return fmt.Sprintf("%s, but pid(s) %v could not be continued: run `cryo recover %d`", outcome, failed, failed[0])
	}
	return outcome + " (the checkpoint in " + c.dir + " was not completed)"
}
