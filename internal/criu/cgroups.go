package criu

import (
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
		return nil, nil
	}
	return []string{ManageCgroupsIgnore}, nil
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
