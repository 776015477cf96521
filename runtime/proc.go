package runtime

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cryo-gpu/cryo/cudacr"
)

// checkAlive returns an error wrapping ErrNoProcess unless pid is a live
// (not zombie) process.
func checkAlive(pid int) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return fmt.Errorf("process %d does not exist (it may have exited): %w", pid, cudacr.ErrNoProcess)
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain spaces and parentheses.
	if i := bytes.LastIndexByte(data, ')'); i > 0 && i+2 < len(data) && data[i+2] == 'Z' {
		return fmt.Errorf("process %d has exited (zombie): %w", pid, cudacr.ErrNoProcess)
	}
	return nil
}

// ProcessTree returns pid and all its descendants, parents first: the set
// CRIU dumps for a tree rooted at pid.
func ProcessTree(pid int) ([]int, error) {
	if err := checkAlive(pid); err != nil {
		return nil, err
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		kids, err := children(tree[i])
		if err != nil {
			return nil, err
		}
		tree = append(tree, kids...)
	}
	return tree, nil
}

// WithTree adds to pids the process tree under root (if root > 0 and
// alive). After a restore on cgroup v2, runc 1.1 leaves the restored
// processes in the cgroup CRIU recorded, not the new container's, so the
// container's cgroup can be empty: its init's tree still finds them.
func WithTree(pids []int, root int) []int {
	if root <= 0 {
		return pids
	}
	tree, err := ProcessTree(root)
	if err != nil {
		return pids
	}
	seen := make(map[int]bool, len(pids)+len(tree))
	out := make([]int, 0, len(pids)+len(tree))
	for _, p := range append(append([]int{}, pids...), tree...) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// children reads /proc/PID/task/*/children (every thread can be a parent).
func children(pid int) ([]int, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		return nil, err
	}
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
	return kids, nil
}

// waitGone waits until pid no longer exists, not even as a zombie, for at
// most timeout. CRIU kills a dumped tree, but its pid stays taken until the
// parent reaps it, and a restore needs that very pid free.
func waitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
