package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// Say only what was checked: before a failed checkpoint's report says the
// processes were left running, each one is looked at (alive, not stopped)
// and each CUDA one asked of the driver (running). When the check fails
// the report says what really happened and gives the remedy that applies.

// workload is what a check found of a target's processes at one moment.
type workload struct {
	running, stopped, gone []int
	// exited are processes gone that are neither the tree's root nor a
	// CUDA process: a shell loop's child, a health check. They end on
	// their own, and their going loses nothing.
	exited     []int
	notRunning map[int]cuda.State // CUDA processes the driver does not report running
}

// settleWait is how long a check lets a SIGCONT land (the state leaves T
// when the task is woken, not when the signal is sent) and a thread that
// runs on a checkpointed GPU crash.
const settleWait = 2 * time.Second

// checkWorkload looks at pids (the root first) and asks the driver about
// the CUDA ones among cudaPIDs that are alive, through d. It uses a
// context of its own: the caller's may be the one an interrupt cancelled.
func checkWorkload(ctx context.Context, d *cuda.Driver, pids, cudaPIDs []int) workload {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	vital := map[int]bool{}
	for _, pid := range cudaPIDs {
		vital[pid] = true
	}
	if len(pids) > 0 {
		vital[pids[0]] = true
	}
	w := lookAt(pids, vital)
	for end := time.Now().Add(settleWait); len(w.stopped) > 0 && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
		w = lookAt(pids, vital)
	}
	time.Sleep(100 * time.Millisecond) // a crash on the GPU comes within milliseconds
	w = lookAt(pids, vital)
	w.notRunning = map[int]cuda.State{}
	for _, pid := range cudaPIDs {
		if !procfs.Alive(pid) {
			continue
		}
		st, err := d.State(cctx, pid)
		if err == nil && st != cuda.StateRunning {
			w.notRunning[pid] = st
		}
	}
	return w
}

// lookAt sorts pids into running, stopped and gone (or exited, for the
// ones that are not vital).
func lookAt(pids []int, vital map[int]bool) workload {
	var w workload
	for _, pid := range pids {
		switch st := procfs.State(pid); {
		case !procfs.Alive(pid) && vital[pid]:
			w.gone = append(w.gone, pid)
		case !procfs.Alive(pid):
			w.exited = append(w.exited, pid)
		case st == "T" || st == "t":
			w.stopped = append(w.stopped, pid)
		default:
			w.running = append(w.running, pid)
		}
	}
	return w
}

// intact: every process runs, and the driver reports each CUDA one running.
func (w workload) intact() bool {
	return len(w.gone) == 0 && len(w.stopped) == 0 && len(w.notRunning) == 0
}

// held: nothing died, but something waits, stopped or with CUDA not
// running: `cryo recover` brings it back.
func (w workload) held() []int {
	seen := map[int]bool{}
	var pids []int
	for _, pid := range w.stopped {
		seen[pid] = true
		pids = append(pids, pid)
	}
	for pid := range w.notRunning {
		if !seen[pid] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// String says what the check found, for a report.
func (w workload) String() string {
	var parts []string
	if len(w.gone) > 0 {
		parts = append(parts, numbered(w.gone, "died", "died"))
	}
	if len(w.stopped) > 0 {
		parts = append(parts, numbered(w.stopped, "is stopped", "are stopped"))
	}
	for pid, st := range w.notRunning {
		parts = append(parts, fmt.Sprintf("the driver reports CUDA of pid %d %s", pid, st))
	}
	if len(w.running) > 0 {
		parts = append(parts, numbered(w.running, "runs", "run"))
	}
	if len(w.exited) > 0 {
		parts = append(parts, numbered(w.exited, "has exited on its own", "have exited on their own"))
	}
	return strings.Join(parts, "; ")
}

// recoverRemedy is the one command that brings held processes back.
func recoverRemedy(pids []int) string {
	return fmt.Sprintf("run `cryo recover %d` (CUDA first, then the processes continue)", pids[0])
}

// foundSuspended are the CUDA processes this run found checkpointed (by
// `cryo cuda suspend`, or a GPU-free pause) and leaves so: held on purpose.
// A checkpoint without a manifest (not taken by cryo) has none.
func foundSuspended(m *manifest.Manifest) map[int]bool {
	held := map[int]bool{}
	if m == nil {
		return held
	}
	for _, p := range m.Processes {
		if p.State == cuda.StateCheckpointed.String() {
			held[p.PID] = true
		}
	}
	return held
}

func without(pids []int, drop map[int]bool) []int {
	var out []int
	for _, pid := range pids {
		if !drop[pid] {
			out = append(out, pid)
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// ErrIncomplete: a checkpoint that cryo was about to call complete does
// not read back so.
var ErrIncomplete = errors.New("checkpoint does not read back complete")

// checkComplete reads dir's manifest back: it has digests, and every file
// they name is in place.
func checkComplete(dir string) error {
	m, err := manifest.Read(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrIncomplete, err)
	}
	if m.Unfinished() {
		return fmt.Errorf("%w: the manifest in %s has no digests", ErrIncomplete, dir)
	}
	for name := range m.Digests {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%w: %w", ErrIncomplete, err)
		}
	}
	return nil
}

// leftRunning are the undo outcomes' claims that the target runs, which
// an intact check says in its own words.
var leftRunning = []string{"the processes were left running", "the container was left running"}

// undoneOnly is outcome without its claim that the target runs: what the
// undo did ("CUDA resumed", "CUDA untouched"), or "" when it did nothing
// else.
func undoneOnly(outcome string) string {
	for _, claim := range leftRunning {
		if rest, ok := strings.CutPrefix(outcome, claim); ok {
			rest = strings.TrimPrefix(rest, " with ")
			return strings.TrimLeft(rest, ",; ")
		}
	}
	return outcome
}

// rolledBackOutcome is a failed step's cause and outcome when
// internal/cuda rolled its own suspend back (cuda.ErrRolledBack): the
// outcome says that CUDA was resumed, where it would say CUDA was
// untouched, and the cause no longer says it too.
func rolledBackOutcome(err error, outcome, untouched string) (error, string) {
	if !errors.Is(err, cuda.ErrRolledBack) {
		return err, outcome
	}
	if outcome == untouched {
		outcome = driverRolledBack
	}
	return saidOnce{err}, outcome
}

// saidOnce is a rolled-back suspend's error without the rollback's own
// words at its end (the outcome says them); errors.Is still finds
// cuda.ErrRolledBack and the cause.
type saidOnce struct{ error }

func (e saidOnce) Error() string {
	return strings.TrimSuffix(e.error.Error(), "; "+cuda.ErrRolledBack.Error())
}

func (e saidOnce) Unwrap() error { return e.error }
