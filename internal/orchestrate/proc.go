package orchestrate

import (
	"fmt"

	"github.com/cryo-gpu/cryo/internal/cuda"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// checkAlive returns an error wrapping ErrNoProcess unless pid is a live
// (not zombie) process.
func checkAlive(pid int) error {
	if !procfs.Alive(pid) {
		return fmt.Errorf("process %d does not exist or has exited: %w", pid, cuda.ErrNoProcess)
	}
	return nil
}

// ProcessTree returns pid and all its descendants, parents first: the set
// CRIU dumps for a tree rooted at pid.
func ProcessTree(pid int) ([]int, error) {
	tree, err := procfs.Tree(pid)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, cuda.ErrNoProcess)
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
