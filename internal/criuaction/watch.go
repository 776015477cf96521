package criuaction

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/orchestrate"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// Bounds of the watcher: how long CRIU may take to exit, and how long the
// container may stay frozen after it did.
var (
	criuExitTimeout = 2 * time.Hour
	thawTimeout     = time.Minute
)

// startWatcher starts a detached copy of this binary, the resume watcher
// (RunWatcher), that waits for CRIU (this script's parent) to exit, then
// resumes CUDA in those of m's processes that still live. CUDA cannot be resumed at post-dump: the
// processes are still frozen by CRIU then, and a driver call on a frozen
// process hangs.
func startWatcher(dir string, m *manifest.Manifest) error {
	criu := os.Getppid()
	var pids []string
	for _, p := range m.Processes {
		pids = append(pids, strconv.Itoa(p.PID))
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{WatcherName} // cmd/cryo chooses RunWatcher by argv[0]
	// CRIU's variables are cleared: the watcher is no action of CRIU's, and
	// CRIU's image directory link dies with CRIU (logf then reads
	// config.EnvWatchDir).
	cmd.Env = append(os.Environ(), "CRTOOLS_SCRIPT_ACTION=", "CRTOOLS_IMAGE_DIR=",
		config.EnvWatchDir+"="+dir, config.EnvWatchPID+"="+strconv.Itoa(criu),
		config.EnvWatchStart+"="+procfs.StartTime(criu), config.EnvWatchPIDs+"="+strings.Join(pids, ","))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives CRIU and runc
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}

// watch is the watcher: it waits for CRIU to exit, then for the container to
// be thawed, and resumes CUDA in the processes still alive.
func watch(ctx context.Context, o *orchestrate.Orchestrator) error {
	criu, _ := strconv.Atoi(os.Getenv(config.EnvWatchPID))
	start := os.Getenv(config.EnvWatchStart)
	if !waitUntil(criuExitTimeout, func() bool { return !procfs.Alive(criu) || procfs.StartTime(criu) != start }) {
		return fmt.Errorf("CRIU (pid %d) still runs after %s; CUDA left suspended: run `cryo cuda resume` on the container's pids", criu, criuExitTimeout)
	}
	pids := livePIDs(os.Getenv(config.EnvWatchPIDs))
	if len(pids) == 0 {
		return nil // the dump ended the container (no --leave-running)
	}
	if !waitUntil(thawTimeout, func() bool { return !anyFrozen(pids) }) {
		return fmt.Errorf("processes %v stay frozen after the dump; CUDA left suspended: thaw the container and run `cryo cuda resume`", pids)
	}
	if err := o.ResumeCUDA(ctx, pids); err != nil {
		return fmt.Errorf("resume CUDA after the dump: %w", err)
	}
	logf("CUDA resumed in %v after the dump", pids)
	return nil
}

// resumeNow undoes preDump's suspend when no watcher could be started.
func resumeNow(ctx context.Context, o *orchestrate.Orchestrator, m *manifest.Manifest) {
	var pids []int
	for _, p := range m.Processes {
		pids = append(pids, p.PID)
	}
	if err := o.ResumeCUDA(ctx, pids); err != nil {
		logf("resume CUDA: %v", err)
	}
}

func livePIDs(list string) []int {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if pid, err := strconv.Atoi(f); err == nil && procfs.Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func anyFrozen(pids []int) bool {
	for _, p := range pids {
		if procfs.Frozen(p) {
			return true
		}
	}
	return false
}

// waitUntil polls cond every 50 ms until it holds (true) or d passes (false).
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}
