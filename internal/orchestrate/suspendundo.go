package orchestrate

import (
	"context"
	"fmt"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// What a suspension gives back, and says it gave back: the CUDA rollback,
// the tree as the dump left it, and the check of a failed run's outcome;
// and the pre-checkpoint hook that comes before a suspend.

// suspensionUndo is the undo half of a suspension: what its run found of
// the target (undo builds it when it is needed, from the run as it
// stands), which its rollback and its checks act on.
type suspensionUndo struct {
	e         env
	t         Target
	m         *manifest.Manifest
	pids      []int   // the target's processes, as found
	toSuspend []int   // the CUDA processes the run suspended
	rate      float64 // bytes/s of the run's suspend, for the rollback's ETA
}

// undo is what s gives back, as the run stands now.
func (s *suspension) undo() suspensionUndo {
	return suspensionUndo{e: s.e, t: s.t, m: s.m, pids: s.pids, toSuspend: s.toSuspend, rate: s.rate}
}

// dumpState is what a dump did to a suspension's processes, for the check
// of a failed run's outcome; a pause, which dumps nothing, has the zero
// value.
type dumpState struct {
	dir    string // the image directory
	dumped bool   // the dump succeeded and no undo gave the processes back
	gone   bool   // the dump ended the processes (checkpointUndo.workloadGone)
}

// rollback resumes CUDA after a failed checkpoint. It uses a fresh context:
// the caller's may be the one that just expired, and the processes must not
// be left suspended because of it. Like internal/cuda's own rollback it goes one
// process at a time: the safe path, when something has already failed.
func (s suspensionUndo) rollback(ctx context.Context) string {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	opts := s.e.gpu.opts(nil)
	opts.Parallel = 1
	d, err := s.e.stepper.take(rctx, s.t.ID, StepRollback, func(ctx context.Context) error {
		copyLine(ctx, s.m, s.toSuspend, s.rate)
		return s.e.gpu.driver.Resume(ctx, s.toSuspend, opts)
	})
	s.m.AddStep(string(StepRollback), d, err)
	if lost := s.e.gpu.driver.LostPIDs(rctx, s.toSuspend, err); err != nil && len(lost) > 0 {
		return cuda.LostError(lost, err).Error()
	}
	if err != nil {
		return fmt.Sprintf("%v: %v; %s: run `cryo recover %d`", ErrRollback, err, procsNow(s.toSuspend), s.toSuspend[0])
	}
	return "the processes were left running with CUDA resumed"
}

// stoppedTree lists the dumped tree as it is now: stopped, it cannot
// change, and it may hold children born between find and the dump that
// CRIU dumped too.
func (s suspensionUndo) stoppedTree(ctx context.Context) []int {
	seen := map[int]bool{}
	var pids []int
	var now []int
	if s.t.PIDs != nil {
		now, _ = s.t.PIDs(ctx)
	}
	for _, pid := range append(now, s.pids...) {
		if !seen[pid] {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	return pids
}

// preHookStep is the checkpoint's pre-checkpoint hook, skipped without
// one; a failure after it wakes the server again
// (checkpointUndo.wakeAfterFailure).
// A checkpoint of processes that a GPU-free pause suspended (containerd
// pauses every task before its checkpoint) skips it: the pause ran it,
// before its own suspend, and the resume after it wakes the server.
func (s *suspension) preHookStep() step {
	return step{name: StepPreHook, skip: func() bool { return s.t.PreCheckpoint == nil || s.pausedBefore },
		do: func(ctx context.Context) error {
			pid, err := firstPID(ctx, s.t)
			if err != nil {
				return err
			}
			return s.t.PreCheckpoint.run(ctx, s.e.log, s.t.ID, hook.PreCheckpoint, pid)
		}}
}

// checkedOutcome checks the claim of a failed checkpoint's outcome and
// returns the outcome, the workload's fate and, when the check contradicts
// the claim, the remedy that applies ("" keeps the report's).
//
// An interrupted step's outcome says it once: the cause says what was
// stopped, the outcome what the undo did, and the check that the processes
// run (the undo's own "left running" would only say it again, unchecked).
func (s suspensionUndo) checkedOutcome(ctx context.Context, step StepName, outcome string, interrupt bool, d dumpState) (string, report.Fate, string) {
	pids := without(s.stoppedTree(ctx), foundSuspended(s.m))
	if len(pids) == 0 {
		return outcome, report.FateUnknown, "" // nothing was found, nothing touched
	}
	if d.gone {
		return goneOutcome(d.dir, outcome)
	}
	w := checkWorkload(ctx, s.e.gpu.driver, pids, s.toSuspend)
	if w.intact() {
		checked := fmt.Sprintf("checked: every process was returned to running (%s, CUDA running)", plural(len(w.running), "process", "processes"))
		if len(w.exited) > 0 {
			checked += "; " + numbered(w.exited, "has exited on its own", "have exited on their own")
		}
		if interrupt {
			outcome = undoneOnly(outcome)
		}
		if outcome == "" {
			return checked, report.FateIntact, ""
		}
		return outcome + "; " + checked, report.FateIntact, ""
	}
	what := fmt.Sprintf("checked after step %s and its rollback: %s", step, w)
	if len(w.gone) == 0 {
		return what, report.FateUnknown, recoverRemedy(w.held())
	}
	if ok, _ := manifest.DumpCompleted(d.dir, nil); ok && d.dumped {
		return what + "; the complete dump in " + d.dir + " holds the workload", report.FateLostKept,
			"run `cryo checkpoint --finish " + d.dir + "`, then `cryo restore --dir " + d.dir + "`"
	}
	return what + "; no complete checkpoint holds them", report.FateLost, "restart the workload; nothing cryo holds can bring it back"
}

// goneOutcome: the dump ended the processes, as asked; only the
// checkpoint holds them.
func goneOutcome(dir, outcome string) (string, report.Fate, string) {
	if ok, _ := manifest.DumpCompleted(dir, nil); ok {
		return outcome + "; CRIU's dump in " + dir + " is complete", report.FateLostKept,
			"run `cryo checkpoint --finish " + dir + "`, then `cryo restore --dir " + dir + "`"
	}
	return outcome, report.FateLost, "restart the workload; nothing cryo holds can bring it back"
}
