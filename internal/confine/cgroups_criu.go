package confine

import (
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
)

// CRIU's placement of restored tasks, as criu/cgroup.c (4.2.1) does it in
// its default mode: rewrite_cgroup_roots gives every controller of the
// image the root runc passed (the new container's cgroup) and, for each of
// the controller's top directories in the image, rewrite_cgsets rewrites
// the paths of the set members that the directory string prefixes, raw:
// strstartswith(path + 1, dir_name), with no regard for slashes. A member
// no directory prefixes keeps the image's path, which CRIU then joins to
// the host's cgroup mount (move_in_cgroup). The port below keeps CRIU's
// arithmetic, C strings included (a protobuf string ends at its first NUL
// for CRIU), so that the check sees the path CRIU will use.
//
// The port gives every controller of the image a root. runc passes one for
// each hierarchy the host has (its /proc/self/cgroup); a controller the
// host lacks gets none, and CRIU keeps its members' image paths, in a
// hierarchy it then mounts itself: a named one (name=x), or a controller
// the host has left unmounted. Neither holds a limit or a device rule the
// spec sets, so the check does not model it.

// placed is one set member after CRIU's rewrite.
type placed struct {
	set      uint32
	name     string // the member's controller names, as in the image
	image    string // its path in the image
	path     string // the path CRIU moves the task into
	rewrites int    // how many (controller, directory) pairs rewrote it
}

// cstr is a protobuf string as CRIU's C code sees it.
func cstr(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return s[:i]
	}
	return s
}

// placeMembers applies CRIU's rewrite of cg's set members into root. bad
// is a member (or nil) for which CRIU would read past a string (an empty
// path, a namespace prefix beyond its path) or loop forever (an empty
// controller name beside others): CRIU's behaviour is then undefined.
func placeMembers(cg *cgroup.CgroupEntry, root string) (members []*placed, bad *placed) {
	type member struct {
		*placed
		prefix uint32 // cgns_prefix, 0 for none
	}
	var all []*member
	for _, set := range cg.GetSets() {
		for _, m := range set.GetCtls() {
			p := &placed{set: set.GetId(), name: cstr(m.GetName()), image: m.GetPath(), path: cstr(m.GetPath())}
			members = append(members, p)
			if p.path == "" || int(m.GetCgnsPrefix()) > len(p.path) {
				return members, p
			}
			all = append(all, &member{placed: p, prefix: m.GetCgnsPrefix()})
		}
	}
	for _, ctrl := range cg.GetControllers() {
		cnames, ok := cNames(ctrl.GetCnames())
		if !ok {
			return members, &placed{name: strings.Join(ctrl.GetCnames(), ","), image: "(a controller)"}
		}
		for _, d := range ctrl.GetDirs() {
			dir := cstr(d.GetDirName())
			for _, m := range all {
				if !cgroupContains(cnames, m.name) || !strings.HasPrefix(m.path[1:], dir) {
					continue
				}
				if m.prefix != 0 { // "/" + the part below the namespace's root
					m.path, m.prefix = root+m.path[m.prefix:], uint32(len(root))
				} else { // whatever follows the directory string
					m.path = root + m.path[len(dir)+1:]
				}
				m.rewrites++
			}
		}
	}
	return members, nil
}

// cNames is a controller's names as CRIU reads them; false for an empty
// name beside others, on which CRIU's strstr loop never ends.
func cNames(names []string) ([]string, bool) {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = cstr(n)
		if out[i] == "" && len(names) > 1 {
			return nil, false
		}
	}
	return out, true
}

// cgroupContains is CRIU's cgroup_contains: whether the member name (a
// comma-separated list of controllers) holds every one of controllers; the
// cgroup v2 controller (one empty name) holds the empty name alone.
func cgroupContains(controllers []string, name string) bool {
	if len(controllers) == 1 && controllers[0] == "" {
		return name == ""
	}
	for _, c := range controllers {
		if !containsCtl(name, c) {
			return false
		}
	}
	return len(controllers) > 0
}

// containsCtl is CRIU's loop of strstr: c occurs in name followed by the
// end or a comma (anywhere, not only at a name's start).
func containsCtl(name, c string) bool {
	for rest := name; ; {
		i := strings.Index(rest, c)
		if i < 0 {
			return false
		}
		rest = rest[i+len(c):]
		if rest == "" || rest[0] == ',' {
			return true
		}
	}
}
