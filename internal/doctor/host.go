package doctor

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/config"
)

func (e *env) kernel() string {
	if e.host.Uname != "" {
		return e.host.Uname
	}
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func (e *env) checkKernel() Check {
	k := e.kernel()
	if k == "" {
		return Check{"kernel", Warn, "uname failed: the kernel release is unknown", "run cryo on Linux"}
	}
	return Check{Name: "kernel", Status: OK, Detail: k}
}

// The capabilities CRIU needs to dump and restore another process's tree:
// CAP_SYS_ADMIN for namespaces, mounts and most of /proc; CAP_SYS_PTRACE to
// seize the tree.
var neededCaps = []struct {
	bit  uint
	name string
}{{21, "CAP_SYS_ADMIN"}, {19, "CAP_SYS_PTRACE"}}

// checkPrivileges: checkpoint and restore run CRIU, runc and the driver
// helper as this user. It warns rather than fails: the host may be fine and
// only this user lacks the rights, which `sudo` gives.
func (e *env) checkPrivileges() Check {
	uid, caps, err := readStatus(filepath.Join(e.host.Proc, "self", "status"))
	if err != nil {
		return Check{"privileges", Warn, "cannot read this process's status: " + err.Error(), "run as root (sudo)"}
	}
	if uid != 0 {
		return Check{"privileges", Warn, fmt.Sprintf("running as uid %d: checkpoint and restore need root (CRIU needs CAP_SYS_ADMIN and CAP_SYS_PTRACE)", uid), "run as root (sudo)"}
	}
	var missing []string
	for _, c := range neededCaps {
		if caps&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return Check{"privileges", Warn, "root, but without " + strings.Join(missing, ", ") + " (a restricted container?): CRIU cannot dump or restore",
			"run as root (sudo) on the host, or in a privileged container"}
	}
	return Check{Name: "privileges", Status: OK, Detail: "root with CAP_SYS_ADMIN and CAP_SYS_PTRACE"}
}

// readStatus returns the effective uid and capabilities from a
// /proc/PID/status file.
func readStatus(path string) (uid int, caps uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	uid = -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		switch {
		case k == "Uid" && len(fields) >= 2:
			uid, err = strconv.Atoi(fields[1]) // real, effective, saved, fs
		case k == "CapEff" && len(fields) == 1:
			caps, err = strconv.ParseUint(fields[0], 16, 64)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %s: %w", path, k, err)
		}
	}
	if uid < 0 {
		return 0, 0, fmt.Errorf("%s: no Uid line", path)
	}
	return uid, caps, sc.Err()
}

func (e *env) checkCgroups() Check {
	if _, err := os.Stat(filepath.Join(e.host.Sys, "fs/cgroup/cgroup.controllers")); err == nil {
		return Check{Name: "cgroups", Status: OK, Detail: "v2 (unified)"}
	}
	return Check{Name: "cgroups", Status: OK, Detail: "v1 or hybrid"}
}

// checkTHP reports the transparent huge page mode. The driver's suspend
// writes the GPU memory into fresh host memory that it maps itself, while
// every thread of the process is held: with 4 KiB pages it is bound by page
// faults, and no per-process control on Linux 6.18 gives that mapping huge
// pages (MADV_HUGEPAGE needs the mapping, which exists only inside the
// driver's call; prctl can only take THP away). cryo's CRIU already restores
// checkpointed memory in huge pages in "madvise" mode, so "always" speeds
// up the checkpoint only: 1.34x for the driver's suspend of a 42 GiB
// inference server on an H100 (docs/benchmarks.md). It is a host-wide
// setting with costs for other work (more memory for sparse mappings,
// compaction stalls), so any mode is ok and cryo only points out the gain.
func (e *env) checkTHP() Check {
	data, err := os.ReadFile(filepath.Join(e.host.Sys, "kernel/mm/transparent_hugepage/enabled"))
	if err != nil {
		return Check{Name: "huge pages", Status: Skip, Detail: "transparent huge pages not available in this kernel"}
	}
	mode := string(data)
	if i, j := strings.Index(mode, "["), strings.Index(mode, "]"); i >= 0 && j > i {
		mode = mode[i+1 : j]
	}
	mode = strings.TrimSpace(mode)
	if mode == "always" {
		return Check{Name: "huge pages", Status: OK, Detail: "transparent huge pages: always"}
	}
	return Check{Name: "huge pages", Status: OK, Detail: "transparent huge pages: " + mode + ` ("always" makes the driver's suspend about 1.3x faster, at a cost to other work's memory; see docs/benchmarks.md)`}
}

// checkCopyTimeout reports a $CRYO_COPY_TIMEOUT that the front ends ignore.
func (e *env) checkCopyTimeout() Check {
	switch {
	case len(e.cfg.Problems) > 0:
		return Check{"copy limit", Warn, e.cfg.Problems[0].Error(), "unset " + config.EnvCopyTimeout + " or give it a positive duration such as 5m"}
	case e.cfg.CopyTimeout > 0:
		return Check{Name: "copy limit", Status: OK, Detail: fmt.Sprintf("%s (%s): a hung GPU copy is cut off then", e.cfg.CopyTimeout, config.EnvCopyTimeout)}
	}
	return Check{Name: "copy limit", Status: OK, Detail: config.DefaultCopyTime.String() + " (default; set " + config.EnvCopyTimeout + " to change)"}
}
