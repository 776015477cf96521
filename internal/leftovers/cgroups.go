package leftovers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// cgroupDirs are the existing directories of container id's cgroup, in
// every mounted hierarchy (cgroup v1 has one per controller, and a hybrid
// host the unified one besides), for the spec's cgroupsPath as runc reads
// it: absolute, systemd's "slice:prefix:name", or relative to the cgroup of
// runc's caller (this process: the shim and cryo-runc run runc as a child);
// runc names a container without one after its id, so relative.
func cgroupDirs(cgroupsPath, id string) ([]string, error) {
	rel, err := cgroupRel(cgroupsPath, id)
	if err != nil {
		return nil, err
	}
	own := ownCgroups()
	var dirs []string
	for _, m := range mounts() {
		if m.fstype != "cgroup" && m.fstype != "cgroup2" {
			continue
		}
		path := rel
		if !filepath.IsAbs(rel) {
			base, ok := own[hierarchyKey(m)]
			if !ok {
				continue
			}
			path = filepath.Join(base, rel)
		}
		if filepath.Clean(path) == "/" {
			return nil, fmt.Errorf("cgroup %q of container %s is a hierarchy's root", cgroupsPath, id)
		}
		dir := filepath.Join(m.point, path)
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}

// cgroupRel is the container's cgroup as runc derives it from the spec: a
// cleaned cgroupfs path (relative ones stay relative), or for systemd's
// "slice:prefix:name" the scope that runc's systemd driver makes.
func cgroupRel(p, id string) (string, error) {
	switch parts := strings.Split(p, ":"); {
	case p == "":
		p = id
	case len(parts) == 3 && !strings.HasPrefix(p, "/"):
		p = systemdScope(parts[0], parts[1], parts[2])
	}
	rel := filepath.Clean(p)
	if rel == "." || strings.HasPrefix(rel, "../") || rel == ".." {
		return "", fmt.Errorf("cgroup %q of container %s is outside its parent", p, id)
	}
	return rel, nil
}

// hierarchyKey names a cgroup hierarchy as /proc/self/cgroup does: its
// controllers ("cpu,cpuacct", "name=systemd"), or "" for cgroup v2.
func hierarchyKey(m mount) string {
	if m.fstype == "cgroup2" {
		return ""
	}
	var ctrls []string
	for _, o := range strings.Split(m.superOpts, ",") {
		switch o {
		case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr", "noprefix", "clone_children", "nsdelegate", "memory_recursiveprot":
		default:
			if !strings.HasPrefix(o, "release_agent=") {
				ctrls = append(ctrls, o)
			}
		}
	}
	return strings.Join(ctrls, ",")
}

// ownCgroups maps each hierarchy of /proc/self/cgroup to this process's
// cgroup in it.
func ownCgroups() map[string]string {
	cgs, _ := procfs.Cgroups(os.Getpid())
	own := map[string]string{}
	for _, cg := range cgs {
		own[cg.Controllers] = cg.Path
	}
	return own
}

// systemdScope is where runc's systemd driver puts the unit of
// "slice:prefix:name": name's scope (or name, itself a slice) in the slice,
// system.slice by default, whose dashes name its parents ("a-b.slice" lies
// in "a.slice").
func systemdScope(slice, prefix, name string) string {
	if slice == "" {
		slice = "system.slice"
	}
	unit := name
	if !strings.HasSuffix(name, ".slice") {
		unit = prefix + "-" + name + ".scope"
		if prefix == "" {
			unit = name + ".scope"
		}
	}
	path := "/"
	if slice != "-.slice" {
		base := strings.TrimSuffix(slice, ".slice")
		elems := strings.Split(base, "-")
		for i := range elems {
			path = filepath.Join(path, strings.Join(elems[:i+1], "-")+".slice")
		}
	}
	return filepath.Join(path, unit)
}

// killCgroups kills every process in dirs and their sub-cgroups until none
// is left. CRIU may still be forking the restored tree when the first
// round runs: a new process is killed in the next. The caller's own
// process is never killed: a cgroupsPath that names the caller's cgroup
// is refused instead.
func killCgroups(dirs []string) error {
	deadline := time.Now().Add(KillWait)
	for {
		pids, err := cgroupPIDs(dirs)
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of cgroup %s survived SIGKILL for %s", pids, dirs[0], KillWait)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("kill process %d of cgroup %s: %w", pid, dirs[0], err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupPIDs lists the processes of dirs and of the cgroups below them.
func cgroupPIDs(dirs []string) ([]int, error) {
	seen := map[int]bool{}
	var pids []int
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil // a cgroup that went meanwhile
			}
			data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				pid, err := strconv.Atoi(f)
				if err != nil || seen[pid] {
					continue
				}
				if pid == os.Getpid() {
					return fmt.Errorf("cgroup %s holds this process (%d): not killing it", p, pid)
				}
				seen[pid] = true
				pids = append(pids, pid)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return pids, nil
}

// removeCgroup removes an emptied cgroup and the cgroups below it, deepest
// first (rmdir is how a cgroup goes); one that is gone already is fine.
func removeCgroup(dir string) error {
	var sub []string
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			sub = append(sub, p)
		}
		return nil
	})
	for i := len(sub) - 1; i >= 0; i-- {
		if err := rmdirRetry(sub[i]); err != nil {
			return err
		}
	}
	return nil
}

// rmdirRetry removes a cgroup, waiting a moment while it is busy: the
// kernel takes a killed process out of its cgroups only once it is reaped.
func rmdirRetry(dir string) error {
	deadline := time.Now().Add(KillWait)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
