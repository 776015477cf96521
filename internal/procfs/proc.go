// Package procfs reads the facts about processes that every part of cryo
// needs from /proc: whether a pid is a live process, its start time, its
// children and tree, whether its cgroup is frozen, its cgroups, the fields
// of its status (tracer, NSpid) and its environment. One reading of
// /proc/PID/stat, so that the front ends, the orchestration and the driver
// wrapper agree about zombies.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// State is the state letter of pid (R, S, D, T, Z, X, …), "" when pid
// does not exist.
func State(pid int) string {
	f := statFields(pid)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// Alive reports whether pid is a process that has not exited: it exists
// and is neither a zombie nor dead. A zombie still holds its pid, but it
// runs nothing and the driver no longer knows it.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	s := State(pid)
	return s != "" && s != "Z" && s != "X"
}

// Exists reports whether pid is taken, zombies included: a restore needs
// the pid free, not only dead.
func Exists(pid int) bool {
	if pid <= 0 {
		return false
	}
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// StartTime is field 22 of /proc/PID/stat (clock ticks since boot); with
// the pid it names a process uniquely, so a reused pid is not mistaken for
// the process it replaced. "" when pid does not exist.
func StartTime(pid int) string {
	f := statFields(pid)
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// statFields are the fields of /proc/PID/stat after the command name, which
// is in parentheses and may itself hold spaces and parentheses: field 3
// (the state) first.
func statFields(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(data[i+1:]))
}

// Children lists pid's children, from /proc/PID/task/*/children (every
// thread can be a parent).
func Children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []int
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited meanwhile
		}
		for _, f := range strings.Fields(string(data)) {
			if k, err := strconv.Atoi(f); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

// Tree returns pid and all its descendants, parents first: the set CRIU
// dumps for a tree rooted at pid. It fails when pid is not Alive.
func Tree(pid int) ([]int, error) {
	if !Alive(pid) {
		return nil, fmt.Errorf("process %d does not exist or has exited", pid)
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, Children(tree[i])...)
	}
	return tree, nil
}

// WaitGone waits until pid no longer exists, not even as a zombie, for at
// most timeout, and reports whether it is gone.
func WaitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for Exists(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Frozen reports whether pid sits in a frozen cgroup (v1 freezer, or v2
// cgroup.freeze), where a driver call would hang.
func Frozen(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "freezer" && v1Frozen(parts[2]) {
			return true
		}
		if parts[0] == "0" && parts[1] == "" && v2Frozen(parts[2]) {
			return true
		}
	}
	return false
}

func v1Frozen(cg string) bool {
	st, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/freezer", cg, "freezer.state"))
	s := strings.TrimSpace(string(st))
	return s != "" && s != "THAWED"
}

func v2Frozen(cg string) bool {
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		st, _ := os.ReadFile(filepath.Join(root, cg, "cgroup.freeze"))
		if strings.TrimSpace(string(st)) == "1" {
			return true
		}
	}
	return false
}
