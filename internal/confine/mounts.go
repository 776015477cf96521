package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// checkMounts compares every mount CRIU would create from mountpoints-*.img
// with the tree the spec describes, by structure: at each mount point the
// image must hold exactly what runc makes there for this spec, with the
// same file system type, source and root, and flags at least as
// restrictive. What runc makes, besides the spec's mounts:
//   - a mask at each masked path: an empty read-only tmpfs over a
//     directory, or the bind of /dev/null over a file;
//   - at each read-only path, a read-only bind of the same file system in
//     place;
//   - /dev/console, for a terminal, a bind of the container's own pty;
//   - on cgroup v1, a tmpfs at the cgroup mount with one mount per
//     controller in it.
//
// Anything else, and anything at a masked or read-only path that is not
// exactly its mask or bind (a proc, sysfs, devtmpfs or binfmt_misc mount,
// say), is refused. A name alone is never enough: CRIU mounts by type,
// superblock and root, so those are what is compared.
func checkMounts(im *image, spec *specs.Spec) error {
	if len(im.mounts) == 0 {
		return nil // no mount namespace of its own: checkNamespaces decides
	}
	if im.mountNS > 1 {
		// runc builds one mount namespace from the spec; a tree of the
		// process's own (unshare -m) would come back from the image alone,
		// with whatever it holds, and could hide a mask of the other.
		return &Violation{Task: "the checkpoint", Field: "mount namespaces", Image: strconv.Itoa(im.mountNS) + " mount namespaces",
			Spec: "one, the container's own, as runc builds it from the spec"}
	}
	t := newMountTree(im, spec)
	for _, m := range im.mounts {
		if o := t.byID[m.GetMntId()]; o != m {
			// The tree is built by mount id: two entries of one id leave
			// CRIU's choice of parent, and so of order, open.
			return t.refuse(m, "mount "+m.GetMountpoint(), fmt.Sprintf("one mount of id %d, not another at %s too", m.GetMntId(), o.GetMountpoint()))
		}
	}
	for _, m := range im.mounts {
		if err := t.check(m); err != nil {
			return err
		}
	}
	return t.checkMasks()
}

// mountTree indexes the image's mounts and the spec's places.
type mountTree struct {
	im               *image
	spec             *specs.Spec
	want             map[string][]specs.Mount // the spec's mounts by destination
	masked, readonly map[string]bool
	at               map[string][]*mnt.MntEntry // the image's mounts by mount point
	byDev            map[uint32][]*mnt.MntEntry // … and by superblock
	byID             map[uint32]*mnt.MntEntry   // … and by mount id
}

func newMountTree(im *image, spec *specs.Spec) *mountTree {
	t := &mountTree{im: im, spec: spec, want: map[string][]specs.Mount{},
		at: map[string][]*mnt.MntEntry{}, byDev: map[uint32][]*mnt.MntEntry{}, byID: map[uint32]*mnt.MntEntry{}}
	for _, m := range spec.Mounts {
		d := path.Clean("/" + m.Destination)
		t.want[d] = append(t.want[d], m)
	}
	t.masked, t.readonly = specPaths(spec)
	for _, m := range im.mounts {
		t.at[m.GetMountpoint()] = append(t.at[m.GetMountpoint()], m)
		t.byDev[m.GetRootDev()] = append(t.byDev[m.GetRootDev()], m)
		if _, dup := t.byID[m.GetMntId()]; !dup {
			t.byID[m.GetMntId()] = m
		}
	}
	return t
}

// check compares one mount with what the spec puts at its mount point.
func (t *mountTree) check(m *mnt.MntEntry) error {
	p := m.GetMountpoint()
	if p != path.Clean("/"+p) {
		// CRIU and the kernel resolve the path, symlinks and all, in a
		// tree cryo cannot see: only the plain form names a place.
		return t.refuse(m, "mount "+p, "a mount point in plain form, as runc writes it")
	}
	if n := len(t.at[p]); n > t.places(p) {
		return t.refuse(m, "mount "+p, placesText(t.places(p))+" at "+p+", not "+placesText(n))
	}
	if err := t.checkSharing(m); err != nil {
		return err
	}
	if p == "/" {
		return nil // the container's root: runc gives CRIU the spec's
	}
	if err := t.checkShape(m); err != nil {
		return err
	}
	return t.checkParent(m)
}

// checkShape compares the mount with what runc makes at its place.
func (t *mountTree) checkShape(m *mnt.MntEntry) error {
	p := m.GetMountpoint()
	switch {
	case t.masked[p]:
		return t.checkMask(m)
	case t.readonly[p]:
		return t.checkReadOnly(m)
	case len(t.want[p]) > 0:
		return t.checkSpecMount(m, t.want[p][0])
	case t.isConsole(p):
		return t.checkConsole(m)
	}
	if cg, ok := t.cgroupParent(p); ok {
		return t.checkController(m, cg)
	}
	if k := m.GetExtKey(); k != "" && !t.runcMaps(k) {
		// runc names CRIU no source for this external mount, and CRIU
		// refuses the restore for it; the orchestration words that
		// refusal with the mount and the flag that supplies it.
		return nil
	}
	if t.checkMask(m) == nil || t.checkReadOnly(m) == nil {
		// A mask or a read-only bind in place where the spec names
		// nothing only hides or takes writes away: no more than the spec
		// grants.
		return nil
	}
	return t.refuse(m, "mount "+p, "no mount there")
}

// checkParent: a mount sits on the mount below it by path. CRIU mounts a
// tree parent first: a mask whose parent were another mount could be
// mounted before the file system it masks, and so lie hidden under it.
func (t *mountTree) checkParent(m *mnt.MntEntry) error {
	below, parent := t.below(m.GetMountpoint()), t.byID[m.GetParentMntId()]
	if below != nil && parent == below {
		return nil
	}
	on := "no mount of the checkpoint"
	if parent != nil {
		on = "the mount at " + parent.GetMountpoint()
	}
	grant := "a mount on the one below it"
	if below != nil {
		grant = "a mount on the one at " + below.GetMountpoint()
	}
	return &Violation{Task: "the checkpoint", Field: "mount " + m.GetMountpoint(), Image: describeMount(m) + " on " + on, Spec: grant}
}

// runcMaps: runc's restore maps this external mount key to a source of
// its own: a bind's destination to the bind's source, /dev/null to the
// host's for masks, and on cgroup v1 each controller's mount point to the
// container's cgroup.
func (t *mountTree) runcMaps(key string) bool {
	if key == "/dev/null" {
		return true
	}
	for _, m := range t.spec.Mounts {
		d := path.Clean("/" + m.Destination)
		if (isBind(m) && (m.Destination == key || d == key)) || ((m.Type == "cgroup" || m.Type == "cgroup2") && path.Dir(key) == d) {
			return true
		}
	}
	return false
}

// places is how many mounts runc stacks at p for this spec.
func (t *mountTree) places(p string) int {
	if n := len(t.want[p]); n > 0 && !t.masked[p] && !t.readonly[p] {
		return n
	}
	return 1
}

func placesText(n int) string {
	if n == 1 {
		return "one mount"
	}
	return strconv.Itoa(n) + " mounts"
}

// checkMasks: every masked path of the spec has its mask and every
// read-only path its bind, where the path exists.
func (t *mountTree) checkMasks() error {
	// In order: a refusal names the same path every time.
	for _, p := range slices.Sorted(maps.Keys(t.masked)) {
		if len(t.at[p]) == 0 && !t.absent(p) {
			return &Violation{Task: "the checkpoint", Field: "masked path " + p, Image: "not masked", Spec: "masked (linux.maskedPaths)"}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(t.readonly)) {
		if len(t.at[p]) == 0 && !t.absent(p) {
			return &Violation{Task: "the checkpoint", Field: "read-only path " + p, Image: "writable (nothing mounted there)", Spec: "read-only (linux.readonlyPaths)"}
		}
	}
	return nil
}

// absent: a masked or read-only path with nothing over it is fine only
// where runc would have skipped it too, because it does not exist. Under
// /proc and /sys that is a fact of the kernel, the same on this host as in
// the container, so the host tells. Elsewhere (a path of the image's root
// file system) the images cannot tell, and the path passes when a mask
// hides a parent.
func (t *mountTree) absent(p string) bool {
	if strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/") {
		_, err := os.Lstat(p)
		return errors.Is(err, fs.ErrNotExist)
	}
	for q := path.Dir(p); q != "/"; q = path.Dir(q) {
		if ms := t.at[q]; len(ms) > 0 {
			return t.masked[q] && t.checkMask(ms[len(ms)-1]) == nil
		}
	}
	return true
}

// refuse words a refusal: the mount point, what the image has there, and
// what the spec grants.
func (t *mountTree) refuse(m *mnt.MntEntry, field, grants string) error {
	return &Violation{Task: "the checkpoint", Field: field, Image: describeMount(m), Spec: grants}
}

func specPaths(spec *specs.Spec) (masked, readonly map[string]bool) {
	masked, readonly = map[string]bool{}, map[string]bool{}
	if spec.Linux == nil {
		return masked, readonly
	}
	for _, p := range spec.Linux.MaskedPaths {
		masked[path.Clean("/"+p)] = true
	}
	for _, p := range spec.Linux.ReadonlyPaths {
		readonly[path.Clean("/"+p)] = true
	}
	return masked, readonly
}
