package criuaction

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/bundle"
	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/confine/outcome"
)

// verifyAction is CRIU's last action before the restored tasks run: every
// thread has its final credentials, filters and files, and is stopped by
// CRIU at its rt_sigreturn.
const verifyAction = "pre-resume"

// verify checks the restored tasks against the bundle's spec at
// pre-resume (package outcome) and, on any excess, kills them before any
// of their instructions runs. It runs whether or not cryo-runc
// orchestrates the restore: the check is the authority behind every
// earlier one. It runs once per CRIU, whichever of cryo's scripts runs
// it first.
func verify(dir string) int {
	if !firstRun(verifyAction) {
		return 0
	}
	began, cpu := time.Now(), cpuTime()
	v, pids := check(dir)
	v.Seconds, v.CPU = time.Since(began).Seconds(), cpuTime()-cpu
	// The verdict is written before the kill: once CRIU is gone, runc
	// fails at once and the front end reads it.
	if err := outcome.WriteVerdict(dir, v); err != nil {
		logf("%s: write the verdict: %v", verifyAction, err)
	}
	if v.Passed {
		logf("%s: %d restored task(s), %d thread(s) checked against the spec in %.1f ms (%.1f ms CPU)", verifyAction, v.Tasks, v.Threads, v.Seconds*1000, v.CPU*1000)
		return 0
	}
	logf("%s: %v; killing the restored tasks before they run", verifyAction, v.Err())
	// CRIU's end closes the pipe that stderr may be: a write there must
	// fail, not end this process before CRIU's cgroup yard is removed.
	signal.Ignore(syscall.SIGPIPE)
	if err := killRestored(pids); err != nil {
		logf("%s: %v", verifyAction, err)
	} else {
		v.Killed = true
		_ = outcome.WriteVerdict(dir, v)
	}
	return 1
}

// check reads the spec and the restored tree and runs the check; a check
// that cannot read what it checks fails (it cannot vouch for the tasks).
func check(dir string) (outcome.Verdict, []int) {
	pid, err := initPID()
	if err != nil {
		return outcome.Verdict{Error: err.Error()}, nil
	}
	pids, err := outcome.Tree("/proc", pid)
	if err != nil {
		return outcome.Verdict{Error: err.Error()}, []int{pid}
	}
	v := outcome.Verdict{Tasks: len(pids), Threads: countThreads(pids)}
	spec, err := bundle.Read(dir)
	if err != nil {
		v.Error = fmt.Sprintf("read the spec: %v", err)
		return v, pids
	}
	w, err := want()
	if err != nil {
		v.Error = err.Error()
		return v, pids
	}
	w.Spec = spec
	err = outcome.Check("/proc", pids, w)
	var viol *outcome.Violation
	switch {
	case err == nil:
		v.Passed = true
	case errors.As(err, &viol):
		v.Violation = viol
	default:
		v.Error, v.NoFilters = err.Error(), errors.Is(err, outcome.ErrNoFilters)
	}
	return v, pids
}

// want is the runtime's side of the check: the cgroups runc put CRIU in
// (CRIU is this script's parent), the host's and cryo's namespaces, and
// the defaults runc leaves a container whose spec sets none (this
// process's own, inherited from runc through CRIU).
func want() (outcome.Want, error) {
	cg, err := outcome.ReadCgroups("/proc/" + strconv.Itoa(os.Getppid()) + "/cgroup")
	if err != nil {
		return outcome.Want{}, err
	}
	oom, err := outcome.ReadOOMScoreAdj("/proc/self/oom_score_adj")
	if err != nil {
		return outcome.Want{}, err
	}
	lim, err := outcome.ReadLimits("/proc/self/limits")
	if err != nil {
		return outcome.Want{}, err
	}
	f, err := restoredFilters()
	if err != nil {
		return outcome.Want{}, err
	}
	return outcome.Want{Cgroups: cg, HostNS: outcome.HostNamespaces("/proc/1", "/proc/self"), OOMScoreAdj: oom, Limits: lim,
		Tracer: os.Getppid(), Filters: f}, nil
}

// restoredFilters reads the seccomp filters CRIU (this script's parent)
// fetched for the restored threads, and removes them: nil when CRIU was
// given no directory or wrote none there (a CRIU without cryo's patch),
// which a spec with seccomp refuses.
func restoredFilters() (outcome.Filters, error) {
	top := os.Getenv(config.EnvCRIUSeccompDir)
	if top == "" {
		return nil, nil
	}
	dir := outcome.FiltersDir(top, os.Getppid())
	defer os.RemoveAll(dir)
	f, err := outcome.ReadFilters(dir)
	if errors.Is(err, outcome.ErrNoFilters) {
		return nil, nil
	}
	return f, err
}

func countThreads(pids []int) int {
	n := 0
	for _, p := range pids {
		ents, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(p), "task"))
		n += len(ents)
	}
	return n
}

// OutcomeOnly is whether this process is CRIU running the outcome check's
// script (outcome.Arm), which execs cryo under whatever name it has.
func OutcomeOnly() bool {
	return os.Getenv(config.EnvOutcomeOnly) == "1" && os.Getenv("CRTOOLS_SCRIPT_ACTION") != ""
}

// cpuTime is this process's user and system time so far, in seconds: the
// check's cost apart from the waits of a loaded host.
func cpuTime() float64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
