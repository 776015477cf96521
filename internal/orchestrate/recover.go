package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// Recover brings back a process tree that a killed cryo left stopped
// (SIGKILL mid-copy, mid-dump, before the digests): CUDA first, then
// SIGCONT, then a check that every process runs. The order matters: a
// SIGCONT before the driver's restore lets threads run on a checkpointed
// GPU, and they crash.

// Steps of a recovery besides find and resume.
const (
	StepWait     = "wait"     // recover: no tracer (CRIU, a driver helper) holds the tree any more
	StepContinue = "continue" // recover: SIGCONT to every process of the tree
	StepCheck    = "check"    // recover: every process runs, CUDA running
)

// ErrTraced: a tracer (a CRIU dump, a driver helper that outlived its
// cryo) still holds the tree.
var ErrTraced = errors.New("the process tree is still held by a tracer")

// tracerWait is how long a recovery waits for a CRIU dump or a driver
// helper, each of which ends on its own, to let the tree go.
const tracerWait = 2 * time.Minute

// RecoverResult is a recovered tree.
type RecoverResult struct {
	PIDs []int // every process of the tree, all running
	CUDA []int // the CUDA processes whose GPU state was restored
}

// recovery is one run of Recover.
type recovery struct {
	e      env
	id     string
	pids   []int
	cuda   []int // every CUDA process of the tree
	resume []int // the ones the driver reports locked or checkpointed
	w      workload
}

// recoverTree is one Recover of the tree rooted at pid.
func recoverTree(ctx context.Context, e env, pid int) (*RecoverResult, error) {
	r := &recovery{e: e, id: fmt.Sprintf("pid %d", pid)}
	pids, err := ProcessTree(pid)
	if err != nil {
		return nil, &report.StepError{Op: "recover", ID: r.id, Step: StepFind, Err: err, Outcome: "nothing was done",
			Remedy: "check the pid (ps -p PID); a tree that is gone can only be restored from a complete checkpoint (cryo restore --dir DIR)"}
	}
	r.pids = pids
	l, err := e.locks.pids("recover", pids)
	if err != nil {
		return nil, e.locks.refused("recover", r.id, err)
	}
	defer l.Release()
	seq := &runner{stepper: e.stepper, op: "recover", id: r.id, steps: []step{
		{name: StepWait, do: r.waitUntraced},
		{name: StepFind, do: r.find},
		{name: StepResume, do: r.resumeCUDA, skip: func() bool { return len(r.resume) == 0 }},
		{name: StepContinue, do: r.cont},
		{name: StepCheck, do: r.check},
	}, failed: r.failed}
	if err := seq.run(ctx); err != nil {
		return nil, err
	}
	return &RecoverResult{PIDs: r.pids, CUDA: r.resume}, nil
}

// RecoverPID is the root pid of the tree a checkpoint in dir was taken
// of, for `cryo recover DIR`.
func RecoverPID(dir string) (int, error) {
	m, err := manifest.Read(dir)
	if err != nil {
		return 0, fmt.Errorf("recover %s: %w", dir, err)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(m.ContainerID, "pid "))
	if !strings.HasPrefix(m.ContainerID, "pid ") || err != nil {
		return 0, report.WithRemedy(fmt.Errorf("recover %s: the checkpoint is of container %s, not of a process tree", filepath.Clean(dir), m.ContainerID),
			"run `cryo recover PID` with the pid of the container's stopped process")
	}
	return n, nil
}

// waitUntraced waits until no thread of the tree is traced: a CRIU dump
// that outlived its cryo ends on its own, and so does a driver helper.
func (r *recovery) waitUntraced(ctx context.Context) error {
	for end := time.Now().Add(tracerWait); ; time.Sleep(100 * time.Millisecond) {
		pid, tracer := tracedThread(r.pids)
		if tracer == 0 {
			return nil
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return fmt.Errorf("%w: pid %d is traced by pid %d (%s)", ErrTraced, pid, tracer, procfs.Comm(tracer))
		}
	}
}

// tracedThread is a process of pids with a traced thread, and its tracer.
func tracedThread(pids []int) (int, int) {
	for _, pid := range pids {
		tids, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*")
		for _, d := range tids {
			tid, _ := strconv.Atoi(filepath.Base(d))
			if t := procfs.ThreadTracer(tid); t != 0 {
				return pid, t
			}
		}
	}
	return 0, 0
}

// find learns the driver's state of the tree's CUDA processes.
func (r *recovery) find(ctx context.Context) error {
	procs, _, err := r.e.gpu.driver.FindLive(ctx, r.pids)
	if err != nil && !errors.Is(err, cuda.ErrLibraryNotFound) {
		return err
	}
	for _, p := range procs {
		r.cuda = append(r.cuda, p.PID)
		switch p.State {
		case cuda.StateRunning:
		case cuda.StateLocked, cuda.StateCheckpointed:
			r.resume = append(r.resume, p.PID)
		default:
			return fmt.Errorf("CUDA process %d is %s: %w", p.PID, p.State, cuda.ErrBadState)
		}
	}
	return nil
}

func (r *recovery) resumeCUDA(ctx context.Context) error { return r.e.gpu.resume(ctx, r.resume) }

// cont continues every process, now that none waits for its GPU state.
func (r *recovery) cont(context.Context) error {
	var failed []int
	for _, pid := range r.pids {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			failed = append(failed, pid)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("SIGCONT to pid(s) %v failed", failed)
	}
	return nil
}

// check looks at the tree once more: "recovered" is said only of a tree
// whose every process runs with its CUDA running.
func (r *recovery) check(ctx context.Context) error {
	r.w = checkWorkload(ctx, r.e.gpu.driver, r.pids, r.cuda)
	if !r.w.intact() {
		return fmt.Errorf("after the resume and SIGCONT: %s", r.w)
	}
	return nil
}

// failed words a failed recovery with what a check finds now.
func (r *recovery) failed(ctx context.Context, s StepName, err error, _ string) error {
	e := &report.StepError{Op: "recover", ID: r.id, Step: string(s), Err: err}
	w := checkWorkload(ctx, r.e.gpu.driver, r.pids, r.cuda)
	e.Outcome = "checked now: " + w.String()
	switch {
	case errors.Is(err, ErrTraced):
		e.Remedy = "wait for that process to end (a CRIU dump or a driver call ends on its own), then run `cryo recover` again"
	case len(w.gone) > 0:
		e.Fate = report.FateLost
		e.Remedy = "restore the tree from a complete checkpoint if there is one (cryo inspect DIR says), else restart it"
	default:
		e.Remedy = "run `cryo cuda state " + strconv.Itoa(r.pids[0]) + "` and `cryo doctor`, then `cryo recover` again"
	}
	return e
}
