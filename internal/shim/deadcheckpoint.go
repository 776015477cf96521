package shim

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/log"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// What a shim killed mid-checkpoint leaves, and what its `delete` makes
// of it. containerd ends the task of a dead shim: it runs `delete`, then
// publishes the task's exit and forgets it. Processes left running would
// be no task of containerd's any more (nothing could stop, signal or
// restart them, and their container could not start again), so the
// runc manager's `runc delete --force` kills them, whatever CUDA or CRIU
// state the checkpoint left them in: none is left running or stopped.
// What is worth keeping is the checkpoint, once CRIU's dump had completed:
// its images are whole, and a restore completes it (its digests, then the
// manifest). A dump cut short is of no use: its images are removed and
// the directory marked partial, so that nothing takes it for a
// checkpoint. containerd removes its own directory of a failed
// checkpoint (the content-store route): nothing is kept there.

// criuGrace bounds the wait for a CRIU that still works on the dead
// shim's dump once the task is killed, within containerd's 5 s for the
// whole `delete`.
const criuGrace = 2 * time.Second

// settleDeadCheckpoint reports what became of the checkpoint that the
// dead shim of task id had in flight, by the record in its bundle, once
// the task's processes are killed; it forgets the task's GPU-free pause.
func settleDeadCheckpoint(ctx context.Context, id, bundle string) {
	orchestrate.New(orchestrate.WithConfig(config.FromEnv())).ForgetPause(id)
	rec, err := readCkptRecord(bundle)
	if err != nil {
		log.G(ctx).WithError(err).WithField("id", id).Warn("cryo: the record of a checkpoint in flight is unreadable: its directory was left as it is")
		return
	}
	if rec == nil {
		return
	}
	waitCRIUDone(rec, criuGrace)
	outcome, kept := settle(rec)
	log.G(ctx).WithFields(log.Fields{"id": id, "dir": rec.Dir, "step": rec.Step, "kept": kept}).
		Warn("cryo: the shim died during a checkpoint: containerd ends the task of a dead shim, and its processes were killed; " + outcome)
	_ = removeCkptRecord(bundle)
}

// settle classifies the checkpoint in rec.Dir, marks a partial one, and
// says what is left.
func settle(rec *ckptRecord) (string, bool) {
	if containerdOwn(rec.Dir) {
		return "the checkpoint went to containerd's own directory, which containerd removes when a checkpoint fails: nothing is kept (`ctr task checkpoint --image-path DIR` keeps a dump that completed)", false
	}
	if _, err := os.Stat(rec.Dir); err != nil {
		return fmt.Sprintf("nothing is kept: %v", err), false
	}
	m, _ := manifest.Read(rec.Dir)
	if m == nil {
		m = &manifest.Manifest{CRIUWorkDir: rec.WorkDir}
	}
	if done, err := manifest.DumpCompleted(rec.Dir, m); err == nil && done {
		return "CRIU's dump had completed, so the checkpoint in " + rec.Dir + " is kept: a restore from it completes it first", true
	}
	cause := fmt.Errorf("the shim of container %s died during its checkpoint, after step %q began, before CRIU's dump completed", rec.ID, cmp.Or(rec.Step, "none"))
	if _, err := manifest.MarkPartial(rec.Dir, cause); err != nil {
		return fmt.Sprintf("CRIU's dump had not completed, and the partial checkpoint in %s could not be marked (%v): remove it, then take the checkpoint again", rec.Dir, err), false
	}
	return "CRIU's dump had not completed: the checkpoint in " + rec.Dir + " is partial, its images were removed and the directory marked (" + manifest.PartialName + "): take the checkpoint again", false
}

// containerdOwn: dir is a directory containerd made for a checkpoint into
// its content store (os.MkdirTemp in $XDG_RUNTIME_DIR or the temporary
// directory, "ctrd-checkpoint*"),
// which containerd removes itself.
func containerdOwn(dir string) bool {
	tmp := filepath.Clean(cmp.Or(os.Getenv("XDG_RUNTIME_DIR"), os.TempDir()))
	return filepath.Dir(filepath.Clean(dir)) == tmp && strings.HasPrefix(filepath.Base(dir), "ctrd-checkpoint")
}

// waitCRIUDone waits, at most grace, for every CRIU that holds the
// checkpoint's directories open to exit: the task is killed, so its dump
// ends, and what it writes last (its log) is written before the
// directory is judged.
func waitCRIUDone(rec *ckptRecord, grace time.Duration) {
	dirs := []string{filepath.Clean(rec.Dir)}
	if rec.WorkDir != "" {
		dirs = append(dirs, filepath.Clean(rec.WorkDir))
	}
	for end := time.Now().Add(grace); time.Now().Before(end) && criuHolds(dirs); {
		time.Sleep(50 * time.Millisecond)
	}
}

// criuHolds reports whether a process named criu has one of dirs open.
func criuHolds(dirs []string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range procs {
		comm, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(comm)) != "criu" {
			continue
		}
		fds, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "fd", "*"))
		for _, fd := range fds {
			if target, err := os.Readlink(fd); err == nil && containsPath(dirs, target) {
				return true
			}
		}
	}
	return false
}

func containsPath(dirs []string, p string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
