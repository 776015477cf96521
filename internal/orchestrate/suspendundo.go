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
// the hooks around a suspend, and the check of a failed run's outcome.

// dumpState is what a dump did to a suspension's processes, for the check
// of a failed run's outcome; a pause, which dumps nothing, has the zero
// value.
type dumpState struct {
	dir    string // the image directory
	dumped bool   // the dump succeeded and no undo gave the processes back
	gone   bool   // the dump ended the processes (checkpoint.workloadGone)
}

// rollback resumes CUDA after a failed checkpoint. It uses a fresh context:
// the caller's may be the one that just expired, and the processes must not
// be left suspended because of it. Like internal/cuda's own rollback it goes one
// process at a time: the safe path, when something has already failed.
func (s *suspension) rollback(ctx context.Context) string {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	opts := s.o.setOptions(nil)
	opts.Parallel = 1
	d, err := s.o.step(rctx, s.t.ID, StepRollback, func(ctx context.Context) error {
		s.copyLine(ctx)
		return s.o.driver().Resume(ctx, s.toSuspend, opts)
	})
	s.m.AddStep(string(StepRollback), d, err)
	if lost := s.o.driver().LostPIDs(rctx, s.toSuspend, err); err != nil && len(lost) > 0 {
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
func (s *suspension) stoppedTree(ctx context.Context) []int {
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
// one; a failure after it wakes the server again (wakeAfterFailure).
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
			return s.t.PreCheckpoint.run(ctx, s.o, s.t.ID, hook.PreCheckpoint, pid)
		}}
}

// wake runs the post-restore hook on the checkpoint's own processes. A
// failure is logged, not returned: the checkpoint (or its rollback) is
// what it is either way, and its outcome says, checked, whether the
// processes run; the log says the server may still sleep.
func (s *suspension) wake(ctx context.Context) {
	if s.t.Wake == nil {
		return
	}
	pid, err := firstPID(ctx, s.t)
	if err == nil {
		err = s.t.Wake.run(ctx, s.o, s.t.ID, hook.PostRestore, pid)
	}
	if err != nil {
		s.o.log().Warn("cryo hook failed: the server may still be asleep", "id", s.t.ID, "error", err)
	}
}

// checkedOutcome checks the claim of a failed checkpoint's outcome and
// returns the outcome, the workload's fate and, when the check contradicts
// the claim, the remedy that applies ("" keeps the report's).
//
// An interrupted step's outcome says it once: the cause says what was
// stopped, the outcome what the undo did, and the check that the processes
// run (the undo's own "left running" would only say it again, unchecked).
func (s *suspension) checkedOutcome(ctx context.Context, step StepName, outcome string, interrupt bool, d dumpState) (string, report.Fate, string) {
	pids := without(s.stoppedTree(ctx), foundSuspended(s.m))
	if len(pids) == 0 {
		return outcome, report.FateUnknown, "" // nothing was found, nothing touched
	}
	if d.gone {
		return goneOutcome(d.dir, outcome)
	}
	w := s.o.checkWorkload(ctx, pids, s.toSuspend)
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
