package confine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// checkCgroups keeps every restored task inside the container's own
// cgroup. runc gives CRIU the new container's cgroup as the root of each
// controller, and CRIU rewrites a task's cgroup path into it only when the
// path starts with the controller's top directory in the image
// (cgroup.img's dirs). A path outside that directory, or one that climbs
// out of it with "..", is not rewritten: CRIU writes the task into that
// path under the host's cgroup mount, which is how an edited image left
// its device rules and limits for the host's root cgroups. Such a path is
// refused; any path inside the container's subtree is fine, since a child
// cgroup is bound by its parent's limits and device rules.
func checkCgroups(im *image, spec *specs.Spec) error {
	if im.cgroups == nil {
		return nil
	}
	tops := map[string][]string{} // controller → its top directories in the image
	for _, c := range im.cgroups.GetControllers() {
		for _, d := range c.GetDirs() {
			if err := cleanCgroupPath("cgroup directory of "+strings.Join(c.GetCnames(), ","), d.GetDirName()); err != nil {
				return err
			}
			for _, n := range c.GetCnames() {
				tops[n] = append(tops[n], strings.Trim(d.GetDirName(), "/"))
			}
		}
	}
	for _, set := range im.cgroups.GetSets() {
		for _, m := range set.GetCtls() {
			if err := checkMember(set.GetId(), m, tops[controllerKey(m.GetName())], specCgroup(spec)); err != nil {
				return err
			}
		}
	}
	return nil
}

// controllerKey is the name a set member shares with its controller: a
// member of several co-mounted controllers ("cpu,cpuacct") is found by
// its first.
func controllerKey(name string) string {
	first, _, _ := strings.Cut(name, ",")
	return first
}

func checkMember(set uint32, m *cgroup.CgMemberEntry, tops []string, own string) error {
	field := fmt.Sprintf("cgroup path (%s, set %d)", m.GetName(), set)
	if err := cleanCgroupPath(field, m.GetPath()); err != nil {
		return err
	}
	if p := m.GetCgnsPrefix(); m.CgnsPrefix != nil && (p == 0 || int(p) > len(m.GetPath())) {
		return &Violation{Task: "the checkpoint", Field: field, Image: fmt.Sprintf("%q with a cgroup-namespace prefix of %d bytes", m.GetPath(), p),
			Spec: "a prefix within the path"}
	}
	path := strings.Trim(m.GetPath(), "/")
	inside := slices.ContainsFunc(tops, func(top string) bool {
		return path == top || strings.HasPrefix(path, top+"/")
	})
	if !inside {
		return &Violation{Task: "the checkpoint", Field: field, Image: fmt.Sprintf("%q, outside the container's cgroup (%q in the image)", m.GetPath(), tops),
			Spec: "the container's own cgroup (" + own + ")"}
	}
	return nil
}

// cleanCgroupPath refuses a path that could climb out of the directory
// CRIU joins it to.
func cleanCgroupPath(field, p string) error {
	for _, part := range strings.Split(p, "/") {
		if part == ".." || part == "." {
			return &Violation{Task: "the checkpoint", Field: field, Image: fmt.Sprintf("%q, which climbs out of its directory", p),
				Spec: "a path inside the container's own cgroup"}
		}
	}
	return nil
}

func specCgroup(spec *specs.Spec) string {
	if spec == nil || spec.Linux == nil || spec.Linux.CgroupsPath == "" {
		return "as the runtime places it"
	}
	return spec.Linux.CgroupsPath
}
