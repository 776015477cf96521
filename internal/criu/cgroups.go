package criu

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cryo-gpu/cryo/internal/bundle"
)

// Where a restore puts the restored tasks. runc moves CRIU into the cgroups
// it made for the new container (criuApplyCgroups) before the restore, and
// every task CRIU forks inherits them. CRIU's default mode (soft) then
// moves each task into the cgroup path cgroup.img records, rewritten into
// the new container's cgroup only when the path starts with the image's
// own directory string (rewrite_cgsets): an image can name any cgroup of
// the host. manage-cgroups=ignore makes CRIU skip cgroup.img altogether
// (no cgroup yard, no directory, property or permission restored, no task
// moved), so the tasks stay where runc put CRIU: in the spec's cgroup on
// every controller, by construction. A child cgroup the container had made
// is not recreated: its tasks come back in the container's own cgroup.
//
// Measured with runc 1.1.5 and CRIU 4.2.1 on a cgroup v1 hybrid: in ignore
// mode CRIU does not recreate a cgroup namespace either (it does so only
// while moving the tasks, prepare_cgns): the tasks come back in CRIU's
// cgroup namespace, the host's, and the container's cgroup mounts show the
// host's whole hierarchy. So a spec that asks for a cgroup namespace keeps
// CRIU's default mode, and the pre-restore check (confine, which applies
// rewrite_cgsets as CRIU does) refuses any image whose paths CRIU would not
// rewrite into the container's cgroup.

// On a host that runs cgroup v2 alone, runc 1.1 names CRIU no cgroup root
// at all (criuApplyCgroups returns before it lists them), so CRIU's
// default mode restores every task into the very path cgroup.img records:
// for a container restored under another name, the checkpointed
// container's cgroup, outside the new one's limits and device rules (the
// check of the restored tasks refuses that). A spec with a cgroup
// namespace there gets the new container's cgroup as CRIU's cgroup root
// (cgroup-root, for every controller), which CRIU rewrites the image's
// paths into, as runc 1.2 and later name it themselves.

// ManageCgroupsIgnore is CRIU's option, as a line of its configuration
// file (the option takes its mode after "=", not after a space).
const ManageCgroupsIgnore = "manage-cgroups=ignore"

// CgroupLines are the lines of CRIU's configuration that keep a restore of
// the container of the bundle in dir in the cgroups runc made for it: none
// when its spec asks for a cgroup namespace (see above).
func CgroupLines(dir string) ([]string, error) {
	spec, err := bundle.ReadRaw(dir)
	if err != nil {
		return nil, err
	}
	if hasCgroupNS(spec) {
		if root := specCgroupPath(spec); root != "" && unifiedOnly() {
			return []string{"cgroup-root=" + root}, nil
		}
		return nil, nil
	}
	return []string{ManageCgroupsIgnore}, nil
}

// unifiedRoot is where a cgroup v2 host mounts its one hierarchy.
var unifiedRoot = "/sys/fs/cgroup"

// unifiedOnly: this host runs cgroup v2 alone (a v1 hybrid mounts v2
// elsewhere, and runc names CRIU a root for each hierarchy there).
func unifiedOnly() bool {
	_, err := os.Stat(filepath.Join(unifiedRoot, "cgroup.controllers"))
	return err == nil
}

// specCgroupPath is the cgroup v2 path runc makes for the spec's
// cgroupsPath: a cgroupfs path as it is, or systemd's "slice:prefix:name"
// as the scope systemd makes (a relative cgroupfs path, whose parent is
// runc's own cgroup, gives "": CRIU then keeps its default).
func specCgroupPath(spec bundle.Raw) string {
	linux, _ := spec["linux"].(map[string]any)
	p, _ := linux["cgroupsPath"].(string)
	if strings.HasPrefix(p, "/") {
		return path.Clean(p)
	}
	parts := strings.Split(p, ":")
	if len(parts) != 3 || parts[2] == "" {
		return ""
	}
	slice := parts[0]
	if slice == "" {
		slice = "system.slice"
	}
	dir, ok := expandSlice(slice)
	if !ok {
		return ""
	}
	unit := parts[2]
	if !strings.HasSuffix(unit, ".slice") {
		if parts[1] != "" {
			unit = parts[1] + "-" + unit
		}
		unit += ".scope"
	}
	return path.Join(dir, unit)
}

// expandSlice is the cgroup path of a systemd slice: "a-b-c.slice" lies in
// /a.slice/a-b.slice/a-b-c.slice (systemd.slice(5)).
func expandSlice(slice string) (string, bool) {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || strings.Contains(name, "/") {
		return "", false
	}
	if name == "-" {
		return "/", true
	}
	dir, prefix := "/", ""
	for _, c := range strings.Split(name, "-") {
		if c == "" {
			return "", false
		}
		prefix += c
		dir = path.Join(dir, prefix+".slice")
		prefix += "-"
	}
	return dir, true
}

func hasCgroupNS(spec bundle.Raw) bool {
	linux, _ := spec["linux"].(map[string]any)
	nss, _ := linux["namespaces"].([]any)
	for _, ns := range nss {
		if m, _ := ns.(map[string]any); m["type"] == "cgroup" {
			return true
		}
	}
	return false
}

// RestoreOnly adds lines to the CRIU configuration of the bundle in dir for
// one restore, and returns the function that takes out again those it
// added (lines the configuration had already stay): runc names the file at
// every later checkpoint of the container too. The function acts once,
// however often it is called.
func RestoreOnly(dir string, lines ...string) (undo func() error, err error) {
	added, err := AddConfig(dir, lines...)
	if err != nil {
		return func() error { return nil }, err
	}
	var once sync.Once
	return func() error {
		once.Do(func() {
			if len(added) > 0 {
				err = RemoveConfig(dir, added...)
			}
		})
		return err
	}, nil
}

// ConfineCgroups passes CgroupLines for one restore of the container of
// the bundle in dir (RestoreOnly). A container that names a CRIU
// configuration of its own (ErrForeignConfig) restores in CRIU's default
// mode, which the pre-restore check covers; its error says so.
func ConfineCgroups(dir string) (undo func() error, lines []string, err error) {
	lines, err = CgroupLines(dir)
	if err != nil || len(lines) == 0 {
		return func() error { return nil }, nil, err
	}
	if undo, err = RestoreOnly(dir, lines...); err != nil {
		return undo, nil, err
	}
	return undo, lines, nil
}
