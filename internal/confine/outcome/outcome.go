// Package outcome checks a restored container's tasks as the kernel reports
// them, after CRIU has restored them and before any of their threads runs:
// the authority behind package confine's checks of what the images claim.
//
// CRIU's action script runs at pre-resume with every restored thread
// ptrace-stopped at its rt_sigreturn, with its final credentials, seccomp
// filters, cgroups, namespaces, mounts, limits and files. Check reads
// /proc for every task and thread and returns the first excess over the
// spec as a *Violation. The rule is confine's: no more than the
// spec grants; a task that holds fewer rights passes.
package outcome

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/confine"
)

// Want is what the restored tasks are checked against.
type Want struct {
	Spec *specs.Spec
	// Cgroups is the cgroup runc put the new container in, by hierarchy
	// ("4:memory" → path), as /proc/PID/cgroup writes it: CRIU's own,
	// since runc moves CRIU into the container's cgroups before a restore.
	Cgroups map[string]string
	// HostNS are the namespace inodes a task of a namespace the spec
	// creates must not be in, by /proc/PID/ns name (the host's, cryo's).
	HostNS map[string][]uint64
	// OOMScoreAdj is the runtime's default when the spec sets none.
	OOMScoreAdj int
	// Limits are the runtime's hard limits, for the types the spec leaves out.
	Limits map[string]uint64
	// Tracer, when not 0, is the process every thread must be traced by
	// (CRIU, at pre-resume): a thread that is not could be running while
	// it is read.
	Tracer int
	// Filters are the restored threads' seccomp chains as CRIU fetched
	// them from the kernel (ReadFilters); nil when CRIU wrote none, which
	// a spec with seccomp refuses (ErrNoFilters).
	Filters Filters
}

// Check returns nil when no task of pids (the restored tree, its root
// first) exceeds w, else the first excess as a *Violation, or an
// error when /proc cannot be read (a check that cannot read cannot vouch).
// proc is the /proc to read ("/proc"; a fake tree in tests).
func Check(proc string, pids []int, w Want) error {
	if w.Spec == nil || len(pids) == 0 {
		return fmt.Errorf("outcome: nothing to check (no spec or no task)")
	}
	c := newChecker(proc, w)
	for i, pid := range pids {
		if err := c.task(pid, i == 0); err != nil {
			return err
		}
	}
	return nil
}

// checker carries what one Check reads once.
type checker struct {
	proc   string
	w      Want
	g      granted
	rootNS map[string]uint64 // the root task's namespaces, which every task shares
	// seccomp is the verdict on each distinct chain (chainKey).
	seccomp map[string]error
}

func newChecker(proc string, w Want) *checker {
	return &checker{proc: proc, w: w, g: grantedBy(w.Spec), rootNS: map[string]uint64{}, seccomp: map[string]error{}}
}

// task checks one process: each thread's credentials, cgroups and
// namespaces, and the process-wide limits, files and, for the root, mounts
// and /dev.
func (c *checker) task(pid int, root bool) error {
	dir := filepath.Join(c.proc, strconv.Itoa(pid))
	tids, err := threads(dir)
	if err != nil {
		return err
	}
	for _, tid := range tids {
		t := taskRef{pid: pid, tid: tid, dir: filepath.Join(dir, "task", strconv.Itoa(tid))}
		for _, f := range []func(taskRef) error{c.status, c.filters, c.cgroups, c.namespaces} {
			if err := f(t); err != nil {
				return err
			}
		}
	}
	t := taskRef{pid: pid, tid: pid, dir: dir}
	checks := []func(taskRef) error{c.oomScoreAdj, c.limits, c.fds}
	if root {
		checks = append(checks, c.mounts, c.devNodes)
	}
	for _, f := range checks {
		if err := f(t); err != nil {
			return err
		}
	}
	return nil
}

// taskRef names one thread (or, with tid == pid, its process) and its
// /proc directory.
type taskRef struct {
	pid, tid int
	dir      string
}

func (t taskRef) label() string {
	if t.tid != t.pid {
		return fmt.Sprintf("restored thread %d of process %d", t.tid, t.pid)
	}
	return fmt.Sprintf("restored process %d", t.pid)
}

func (t taskRef) file(name string) string { return filepath.Join(t.dir, name) }

// violation is an excess of t's.
func violation(t taskRef, field, got, spec string) error {
	return &Violation{Task: t.label(), Field: field, Kernel: got, Spec: spec}
}

// threads lists a process's thread ids.
func threads(dir string) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return nil, fmt.Errorf("outcome: read threads: %w", err)
	}
	var tids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, n)
		}
	}
	return tids, nil
}

// Tree is root and its descendants, root first, from every thread's
// children (a child's parent is the thread that forked it).
func Tree(proc string, root int) ([]int, error) {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		dir := filepath.Join(proc, strconv.Itoa(out[i]))
		tids, err := threads(dir)
		if err != nil {
			return nil, err
		}
		for _, tid := range tids {
			data, err := os.ReadFile(filepath.Join(dir, "task", strconv.Itoa(tid), "children"))
			if err != nil {
				return nil, fmt.Errorf("outcome: read children: %w", err)
			}
			for _, f := range strings.Fields(string(data)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
	}
	return out, nil
}

// Violation is one excess of a restored task over its spec, as the kernel
// reports it: the sibling of confine's *Violation, which says what the
// images claim. It wraps confine.ErrExceedsSpec too.
type Violation struct {
	Task   string // the restored thread or process
	Field  string // "uid", "capabilities (bounding)", "mount /proc/acpi", …
	Kernel string // what the kernel reports
	Spec   string // what the spec grants
}

func (v *Violation) Error() string {
	return fmt.Sprintf("%s: %s is %s after the restore, but the container's spec grants %s", v.Task, v.Field, v.Kernel, v.Spec)
}

func (v *Violation) Unwrap() error { return confine.ErrExceedsSpec }
