package confine

import (
	"fmt"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// checkCgroups keeps every restored task inside the container's own
// cgroup. cryo restores a container whose spec has no cgroup namespace
// with manage-cgroups=ignore (criu.ConfineCgroups): CRIU then leaves the
// tasks in the cgroups runc made, whatever cgroup.img says. With a cgroup
// namespace, or a container whose CRIU configuration is its own, CRIU
// moves each task into the path cgroup.img records, rewritten into the new
// container's cgroup only where CRIU's raw string test matches. So the
// check applies CRIU's own rewrite (placeMembers) and refuses any member
// CRIU would place outside the container's cgroup: one no directory
// rewrites (CRIU keeps the image's path, anywhere on the host), one whose
// rewrite leaves a sibling ("/ctr" + "0"), one rewritten twice (the second
// depends on the new root's name), and a path that climbs with "..". Child
// cgroups of the container's are fine: a child is bound by its parent's
// limits and device rules.
func checkCgroups(im *image, spec *specs.Spec) error {
	if im.cgroups == nil {
		return nil
	}
	if err := checkCgroupDirs(im.cgroups, spec); err != nil {
		return err
	}
	root := newCgroupRoot(spec)
	members, bad := placeMembers(im.cgroups, root)
	if bad != nil {
		return &Violation{Task: "the checkpoint", Field: fmt.Sprintf("cgroup path (%s, set %d)", ctlLabel(bad.name), bad.set),
			Image: fmt.Sprintf("%q, which CRIU cannot parse (an empty path or controller name, or a cgroup-namespace prefix beyond the path): the task could land outside the container's cgroup", bad.image),
			Spec:  "the container's own cgroup (" + specCgroup(spec) + ")"}
	}
	for _, m := range members {
		if err := checkPlaced(m, root, spec); err != nil {
			return err
		}
	}
	return checkCgnsPrefixes(im.cgroups, spec)
}

// newCgroupRoot is the root runc passes CRIU: the spec's cgroupsPath where
// it is a plain absolute path (runc's cgroupfs driver), else a stand-in.
func newCgroupRoot(spec *specs.Spec) string {
	if spec.Linux == nil {
		return "/cryo-new-container-cgroup"
	}
	if p := spec.Linux.CgroupsPath; strings.HasPrefix(p, "/") && !strings.Contains(p, ":") && strings.Trim(p, "/") != "" {
		return "/" + strings.Trim(p, "/")
	}
	return "/cryo-new-container-cgroup"
}

func checkPlaced(m *placed, root string, spec *specs.Spec) error {
	field := fmt.Sprintf("cgroup path (%s, set %d)", ctlLabel(m.name), m.set)
	own := "the container's own cgroup (" + specCgroup(spec) + ")"
	switch {
	case m.rewrites == 0:
		return &Violation{Task: "the checkpoint", Field: field, Spec: own,
			Image: fmt.Sprintf("%q, which no cgroup directory of the image prefixes as CRIU compares them: CRIU would move the task into %q of the host, outside the container's cgroup", m.image, m.path)}
	case m.rewrites > 1:
		return &Violation{Task: "the checkpoint", Field: field, Spec: own,
			Image: fmt.Sprintf("%q, which CRIU would rewrite %d times, the result depending on the new cgroup's name", m.image, m.rewrites)}
	case climbs(m.path):
		return &Violation{Task: "the checkpoint", Field: field, Spec: "a path inside the container's own cgroup",
			Image: fmt.Sprintf("%q, which climbs out of its directory", m.image)}
	case m.path != root && !strings.HasPrefix(m.path, root+"/"):
		return &Violation{Task: "the checkpoint", Field: field, Spec: own,
			Image: fmt.Sprintf("%q, which CRIU would rewrite to %q beside the container's cgroup %q, outside the container's cgroup", m.image, m.path, root)}
	}
	return nil
}

// checkCgroupDirs refuses what CRIU's default mode does with the image's
// directories besides placing tasks: a directory name that climbs (CRIU
// creates the missing ones, joined to the container's cgroup), and an
// owner other than root or the spec's container root (CRIU chowns the
// container's own cgroup directory to it, a delegation the spec does not
// grant).
func checkCgroupDirs(cg *cgroup.CgroupEntry, spec *specs.Spec) error {
	var walk func(cnames string, dirs []*cgroup.CgroupDirEntry) error
	walk = func(cnames string, dirs []*cgroup.CgroupDirEntry) error {
		for _, d := range dirs {
			field := "cgroup directory of " + cnames
			if climbs(cstr(d.GetDirName())) {
				return &Violation{Task: "the checkpoint", Field: field, Image: fmt.Sprintf("%q, which climbs out of its directory", d.GetDirName()),
					Spec: "a path inside the container's own cgroup"}
			}
			if p := d.GetDirPerms(); p != nil && (!rootOwner(p.GetUid(), spec, true) || !rootOwner(p.GetGid(), spec, false)) {
				return &Violation{Task: "the checkpoint", Field: field + " (owner)", Image: fmt.Sprintf("%q owned by %d:%d", d.GetDirName(), p.GetUid(), p.GetGid()),
					Spec: "a cgroup owned by root, as runc makes it"}
			}
			if err := walk(cnames, d.GetChildren()); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range cg.GetControllers() {
		if err := walk(strings.Join(c.GetCnames(), ","), c.GetDirs()); err != nil {
			return err
		}
	}
	return nil
}

// rootOwner: id is root, or the host id the spec maps the container's root
// to (a user-namespaced container's cgroup may be delegated to it).
func rootOwner(id uint32, spec *specs.Spec, uid bool) bool {
	if id == 0 {
		return true
	}
	if spec.Linux == nil {
		return false
	}
	maps := spec.Linux.GIDMappings
	if uid {
		maps = spec.Linux.UIDMappings
	}
	for _, m := range maps {
		if m.ContainerID == 0 && m.HostID == id {
			return true
		}
	}
	return false
}

// checkCgnsPrefixes refuses a cgroup-namespace prefix of 0 that the image
// records as set: CRIU then makes the host's root cgroup the namespace's
// root (prepare_cgns) before it moves the task on.
func checkCgnsPrefixes(cg *cgroup.CgroupEntry, spec *specs.Spec) error {
	for _, set := range cg.GetSets() {
		for _, m := range set.GetCtls() {
			if m.CgnsPrefix != nil && m.GetCgnsPrefix() == 0 {
				return &Violation{Task: "the checkpoint", Field: fmt.Sprintf("cgroup path (%s, set %d)", m.GetName(), set.GetId()),
					Image: fmt.Sprintf("%q with a cgroup-namespace prefix of 0 bytes (the host's root cgroup)", m.GetPath()),
					Spec:  "a cgroup namespace rooted at the container's own cgroup (" + specCgroup(spec) + ")"}
			}
		}
	}
	return nil
}

// climbs: a path with a "." or ".." part, which could leave the directory
// CRIU joins it to.
func climbs(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." || part == "." {
			return true
		}
	}
	return false
}

// ctlLabel names a set member's controllers; the unified hierarchy has
// none.
func ctlLabel(name string) string {
	if name == "" {
		return "cgroup v2"
	}
	return name
}

func specCgroup(spec *specs.Spec) string {
	if spec == nil || spec.Linux == nil || spec.Linux.CgroupsPath == "" {
		return "as the runtime places it"
	}
	return spec.Linux.CgroupsPath
}
