package fixup

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// unifiedRoot is where cgroup v2 is mounted on a host that runs on it alone.
const unifiedRoot = "/sys/fs/cgroup"

// JoinSpecCgroup moves the restored processes pids of container id into
// the cgroup want that their new spec names (its cgroupsPath), where they
// are elsewhere. In CRIU's default mode runc 1.1 on cgroup v2 left them
// where the checkpoint recorded them (CRIU restores each task into its
// recorded cgroup), which for a container restored under another name is
// the original's cgroup: the new spec's device rules (the GPUs the restored
// container was given) and its limits would not apply, and the driver
// could not open a new GPU.
//
// It is a safety net now, not the placement: cryo restores a container
// without a cgroup namespace with manage-cgroups=ignore (criu.ConfineCgroups),
// which leaves the tasks in the cgroup runc made, and the pre-restore check
// refuses any image whose paths CRIU's default mode (kept for a cgroup
// namespace) would not rewrite into it; so it finds nothing to move unless
// the container named a CRIU configuration of its own. It acts on a plain
// cgroupfs path on a pure cgroup v2 host only: on a v1 hybrid (v2 at
// /sys/fs/cgroup/unified) it does nothing, and the placement is the mode's.
func JoinSpecCgroup(log *slog.Logger, id, want string, pids []int) {
	if want == "" || !strings.HasPrefix(want, "/") {
		return
	}
	if _, err := os.Stat(filepath.Join(unifiedRoot, "cgroup.controllers")); err != nil {
		return
	}
	dir := filepath.Join(unifiedRoot, want)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return
	}
	for _, pid := range pids {
		have, err := cgroupOf(pid)
		if err != nil || have == want {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			log.Warn("restored process left in the checkpoint's cgroup: the new spec's device rules and limits do not apply to it",
				"id", id, "pid", pid, "cgroup", have, "spec_cgroup", want, "error", err)
			continue
		}
		log.Info("restored process moved into its spec's cgroup", "id", id, "pid", pid, "from", have, "to", want)
	}
}

// cgroupOf is pid's cgroup v2 path.
func cgroupOf(pid int) (string, error) {
	cgs, err := procfs.Cgroups(pid)
	if err != nil {
		return "", err
	}
	for _, cg := range cgs {
		if cg.ID == "0" && cg.Controllers == "" {
			return cg.Path, nil
		}
	}
	return "", fmt.Errorf("pid %d has no cgroup v2 entry", pid)
}
