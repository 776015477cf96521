package precheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procRoot is /proc; tests do not change it, they use real processes.
const procRoot = "/proc"

// Root refuses a non-root caller of op: CRIU needs CAP_SYS_ADMIN and more.
func Root(op string) error {
	if os.Geteuid() == 0 {
		return nil
	}
	return &Error{Err: ErrNotRoot, Detail: fmt.Sprintf("cryo %s drives CRIU, which needs root (uid %d)", op, os.Geteuid()),
		Remedy: "run as root (sudo)"}
}

// PIDsFree refuses a restore whose pids are taken: CRIU gives the processes
// back their pids, and fails late, after reading the images, when one is in
// use. It names the pid and the process that holds it.
func PIDsFree(pids []int) error {
	for _, pid := range pids {
		if _, err := os.Stat(filepath.Join(procRoot, strconv.Itoa(pid))); err != nil {
			continue
		}
		holder := describe(pid)
		return &Error{Err: ErrPIDInUse, Detail: fmt.Sprintf("pid %d of the checkpoint is held by %s", pid, holder),
			Remedy: fmt.Sprintf("stop %s (the original processes, if they still run), then retry", holder)}
	}
	return nil
}

// describe names a process: "sleep (pid 42, thread of 40)".
func describe(pid int) string {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	name := comm(pid)
	if tgid := statusField(dir, "Tgid"); tgid != "" && tgid != strconv.Itoa(pid) {
		return fmt.Sprintf("%s (thread %d of pid %s)", name, pid, tgid)
	}
	if statusField(dir, "State") == "Z (zombie)" {
		return fmt.Sprintf("%s (pid %d, a zombie its parent %s has not reaped)", name, pid, statusField(dir, "PPid"))
	}
	return fmt.Sprintf("%s (pid %d)", name, pid)
}

func comm(pid int) string {
	b, _ := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "a process"
}

func statusField(dir, key string) string {
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
