package orchestrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/hook"
	"github.com/cryo-gpu/cryo/internal/lock"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate/precheck"
	"github.com/cryo-gpu/cryo/internal/procfs"
	"github.com/cryo-gpu/cryo/internal/report"
)

// ProcessOptions configures a bare-process checkpoint (no container).
type ProcessOptions struct {
	PID          int    // root of the process tree
	Dir          string // image directory; created if missing, must hold no checkpoint
	LeaveRunning bool   // keep the tree running after the dump
	// TCPEstablished dumps established TCP connections (CRIU locks the
	// network meanwhile); without it a tree with one fails to dump.
	TCPEstablished bool
	// ShellJob lets CRIU dump a tree that is not a session leader or whose
	// stdio is a terminal, and restore it into the caller's session and
	// terminal.
	ShellJob bool
	// PreHook, if set, runs before anything is suspended (see
	// Target.PreCheckpoint); Wake wakes the tree after a leave-running
	// checkpoint or a failed one. Their exec hooks run through nsenter.
	PreHook, Wake *hook.Spec
}

// RestoreOptions configures a bare-process restore.
type RestoreOptions struct {
	Dir      string
	ShellJob bool
	// PostHook, if set, runs once the restored tree runs with its CUDA
	// state; its failure leaves the tree running (PostHookFailed).
	PostHook *hook.Spec
	// TCPEstablished restores established TCP connections; a checkpoint
	// that holds some is restored with it anyway.
	TCPEstablished bool
}

// RestoreResult is a restored tree.
type RestoreResult struct {
	PID            int                // the restored root's pid
	Manifest       *manifest.Manifest // nil for a checkpoint without a manifest
	TCPConnections int                // established TCP connections restored
}

// checkpointProcess is one CheckpointProcess.
func checkpointProcess(ctx context.Context, e env, po ProcessOptions) (*manifest.Manifest, error) {
	id := fmt.Sprintf("pid %d", po.PID)
	if err := checkAlive(po.PID); err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: id, Step: StepPrepare, Err: err, Outcome: "nothing was checkpointed", Remedy: "check the pid (ps -p PID) and retry"}
	}
	if err := precheck.BareCheckpoint(po.PID, po.ShellJob, ProcessTree); err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: id, Step: StepPrepare, Err: err, Outcome: "nothing was checkpointed, the processes were not touched"}
	}
	if err := prepareDir(po.Dir); err != nil {
		return nil, &report.StepError{Op: "checkpoint", ID: id, Step: StepPrepare, Err: err, Outcome: "nothing was checkpointed", Remedy: "give --dir a new or empty directory"}
	}
	// The tree waits, stopped, until the checkpoint is durable. Not with
	// established TCP: CRIU keeps the network locked for a stopped tree, and
	// a tree continued after a failure would find its connections dead.
	stopped := !po.LeaveRunning && !po.TCPEstablished
	t := Target{ID: id, PIDs: func(context.Context) ([]int, error) { return ProcessTree(po.PID) }, DumpLeavesStopped: stopped,
		PreCheckpoint: bareHook(po.PreHook), Wake: bareHook(po.Wake)}
	dump := func(ctx context.Context) error {
		return criuDump(ctx, po.PID, po.Dir, criuOptions{Options: criu.Options{ShellJob: po.ShellJob, TCPEstablished: po.TCPEstablished, LeaveRunning: po.LeaveRunning, LeaveStopped: stopped}, Binary: e.cfg.CRIU})
	}
	c := newCheckpoint(e, t, po.Dir, po.LeaveRunning, dump)
	m, err := c.take(ctx, c.table())
	if err != nil && checkComplete(po.Dir) != nil {
		discardPartial(po, err) // a complete checkpoint is kept, whatever came after it
	}
	// Outside the timed steps: how soon the parent reaps is not the dump's
	// cost, but a restore right after us needs the pid free.
	if err == nil && !po.LeaveRunning && !procfs.WaitGone(po.PID, 5*time.Second) {
		e.log.Warn("dumped process not reaped yet by its parent: a restore needs its pid free", "pid", po.PID)
	}
	return m, err
}

// bareHook is s run on a bare tree: exec hooks through nsenter.
func bareHook(s *hook.Spec) *Hook {
	if s == nil {
		return nil
	}
	return &Hook{Spec: *s, Exec: hook.Nsenter}
}

// discardPartial removes the images of a failed checkpoint whose processes
// run on (rolled back, or left running): they are not needed to bring
// anything back, and a partial dump holds process memory, often gigabytes.
// The logs stay, with a mark that says what happened (manifest.MarkPartial),
// and the same --dir can be given again. A process that is stopped or gone
// may need what was written: then nothing is touched.
func discardPartial(po ProcessOptions, err error) {
	if st := procfs.State(po.PID); st == "" || st == "T" || st == "t" || st == "Z" {
		return
	}
	p, merr := manifest.MarkPartial(po.Dir, err)
	var se *report.StepError
	if !errors.As(err, &se) {
		return
	}
	if merr != nil {
		se.Outcome += "; the partial checkpoint in " + po.Dir + " could not be removed (" + merr.Error() + "): delete it"
		return
	}
	se.Outcome += fmt.Sprintf("; the partial checkpoint in %s was removed (%d files; its logs kept, marked %s), and the directory can be given to --dir again", po.Dir, p.Removed, manifest.PartialName)
}

// prepareDir creates the image directory owner-only, refusing one that
// holds anything: CRIU would overwrite some images of an earlier checkpoint
// and leave others, and unrelated files would be digested and carried into
// an image built from the checkpoint. A directory that a failed checkpoint
// marked partial is emptied and reused.
func prepareDir(dir string) error {
	if _, err := manifest.ClearPartial(dir); err != nil {
		return fmt.Errorf("image directory %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image directory %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.Name() == manifest.ManifestName || e.Name() == "inventory.img" {
			return fmt.Errorf("%s: %w", dir, ErrDirInUse)
		}
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s holds %d entries (%s…): %w", dir, len(entries), entries[0].Name(), ErrDirNotEmpty)
	}
	if err := manifest.PrivateDir(dir); err != nil {
		return err
	}
	// Its former owner could write into it until PrivateDir took it: it
	// must still be empty now that nobody else can.
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		return fmt.Errorf("%s gained entries while cryo made it private: %w", dir, errors.Join(ErrDirNotEmpty, err))
	}
	return nil
}

// bareRestore is one RestoreDetached of the checkpoint in ro.Dir.
type bareRestore struct {
	e    env
	ro   RestoreOptions
	id   string
	lock *lock.Lock // the checkpoint's, then its pids' too (check)
}

func (b *bareRestore) run(ctx context.Context) (*RestoreResult, error) {
	if err := precheck.Root("restore"); err != nil {
		return nil, &report.StepError{Op: "restore", ID: b.id, Step: StepPrepare, Err: err, Outcome: "nothing was restored"}
	}
	l, release, err := b.e.locks.hold(nil, "restore", b.id)
	if err != nil {
		return nil, b.e.locks.refused("restore", b.id, err)
	}
	defer release()
	b.lock = l
	m, err := b.check(ctx)
	if err != nil {
		return nil, err
	}
	tcp := restoreTCP(b.e.log, b.id, b.ro.Dir)
	waitTimeWait(ctx, b.e, b.id, b.ro.Dir) // a bare restore binds in this network namespace
	pid, err := runRestore(ctx, b.e, b.id, m, b.restorer(tcp, bootTicks()))
	if pid == 0 {
		return nil, err
	}
	if err == nil || PostHookFailed(err) {
		if cerr := b.checkRestored(ctx, pid, m); cerr != nil {
			err = cerr
		}
	}
	return &RestoreResult{PID: pid, Manifest: m, TCPConnections: tcp}, err
}

// check refuses what the restore cannot take, before anything is
// restored, and locks the checkpoint's pids.
func (b *bareRestore) check(ctx context.Context) (*manifest.Manifest, error) {
	// A container's checkpoint is no process tree's: say so before its
	// GPUs are matched to the host's, or its pid 1 to the host's init.
	if err := precheck.ContainerTree(b.ro.Dir); err != nil {
		return nil, &report.StepError{Op: "restore", ID: b.id, Step: StepPrepare, Err: err, Outcome: "nothing was restored"}
	}
	// The checkpoint first: a stale or corrupt one must be named as such,
	// not as a pid conflict that stopping the original would not cure.
	m, err := checkRestore(ctx, b.e, b.id, b.ro.Dir, GPUScope{})
	if err != nil {
		return nil, err
	}
	if err := precheck.ImagePIDsFree(b.ro.Dir); err != nil {
		return nil, &report.StepError{Op: "restore", ID: b.id, Step: StepPrepare, Err: err, Outcome: "nothing was restored"}
	}
	// CRIU gives the processes back their pids: hold them from before they
	// exist until their CUDA runs again.
	if err := b.lock.AddPIDs(manifestPIDs(m)); err != nil {
		return nil, b.e.locks.refused("restore", b.id, err)
	}
	return m, nil
}

// restorer is the bare tree's part of the restore: CRIU, with tcp
// established connections to keep, and, for a failed restore, the kill of
// what it restored since clock tick began.
func (b *bareRestore) restorer(tcp int, began uint64) Restorer {
	ro := b.ro
	return Restorer{
		Restore: func(ctx context.Context) (int, error) {
			// The memory CRIU reads back, for the line: it reports no progress.
			taskFrom(ctx).SetTotal(criu.PagesBytes(ro.Dir))
			return criuRestore(ctx, ro.Dir, criuOptions{Options: criu.Options{ShellJob: ro.ShellJob, TCPEstablished: ro.TCPEstablished || tcp > 0}, Binary: b.e.cfg.CRIU})
		},
		Target: func(pid int) Target {
			return Target{ID: fmt.Sprintf("pid %d", pid), PIDs: func(context.Context) ([]int, error) { return ProcessTree(pid) }}
		},
		Lock:        b.lock,
		Remedy:      bareRestoreRemedy,
		Cleanup:     func(ctx context.Context) error { return killRestoredTree(ctx, ro.Dir, began) },
		Removed:     bareRemoved,
		PostRestore: bareHook(ro.PostHook),
	}
}

// checkRestored: a restore is said done only of a tree whose every process
// runs, with the CUDA ones running by the driver (those the checkpoint
// recorded suspended by the user stay so, as they were).
func (b *bareRestore) checkRestored(ctx context.Context, pid int, m *manifest.Manifest) error {
	id, dir := b.id, b.ro.Dir
	tree, err := ProcessTree(pid)
	if err != nil {
		tree = []int{pid}
	}
	held := foundSuspended(m)
	w := checkWorkload(ctx, b.e.gpu.driver, without(tree, held), without(manifestPIDs(m), held))
	if w.intact() {
		return nil
	}
	e := &report.StepError{Op: "restore", ID: id, Step: StepCheck, Err: fmt.Errorf("after the restore: %s", w),
		Outcome: "the checkpoint in " + dir + " is unchanged"}
	if len(w.gone) > 0 {
		e.Fate = report.FateLostKept
		e.Remedy = "kill what is left of the tree (kill -KILL " + fmt.Sprint(pid) + "), then restore again: cryo restore --dir " + dir
		return e
	}
	e.Remedy = recoverRemedy(w.held())
	return e
}

// bareRestoreRemedy says what to do about a failed CRIU restore, naming the
// cause where CRIU's message shows it.
func bareRestoreRemedy(err error) string {
	switch msg := err.Error(); {
	case strings.Contains(msg, "Address already in use"):
		return "another socket holds a port of the checkpoint: stop what listens or is connected there (the original processes, if they still run), then retry"
	case strings.Contains(msg, "File exists") && strings.Contains(msg, "fork"):
		return "a pid of the checkpoint is in use (the original processes still run, or have not been reaped yet): stop them, then retry"
	case strings.Contains(msg, "inherit session from"):
		return "run `cryo restore --shell-job` from the terminal the job is to run on (its stdin must be that terminal)"
	}
	if r := criu.RemedyOf(err); r != "" {
		return r
	}
	return "read the CRIU log from its first error line, then retry; the checkpoint itself was not changed"
}

// manifestPIDs are the CUDA processes a checkpoint recorded; none for a
// checkpoint without a manifest.
func manifestPIDs(m *manifest.Manifest) []int {
	if m == nil {
		return nil
	}
	pids := make([]int, 0, len(m.Processes))
	for _, p := range m.Processes {
		pids = append(pids, p.PID)
	}
	return pids
}
