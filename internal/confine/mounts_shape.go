package confine

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

const (
	maskGrant     = "a mask: an empty read-only tmpfs, or the bind of /dev/null (linux.maskedPaths)"
	readOnlyGrant = "a read-only bind in place of the file system below (linux.readonlyPaths)"
	consoleGrant  = "the bind of the container's own pty of its devpts at /dev/pts (process.terminal)"
)

// checkMask: a masked path holds exactly a mask. runc masks a directory
// with a fresh read-only tmpfs and a file with a bind of /dev/null, which
// it names to CRIU as the external mount "/dev/null" (and maps to the
// host's /dev/null at restore, whatever the entry's other fields say).
func (t *mountTree) checkMask(m *mnt.MntEntry) error {
	field := "masked path " + m.GetMountpoint()
	if m.GetExtKey() != "" {
		typ := m.GetFstype()
		if m.GetExtKey() == "/dev/null" && m.GetRoot() == "/null" && (typ == uint32(mnt.Fstype_TMPFS) || typ == uint32(mnt.Fstype_DEVTMPFS)) {
			return nil
		}
		return t.refuse(m, field, maskGrant)
	}
	if m.GetFstype() != uint32(mnt.Fstype_TMPFS) || m.GetRoot() != "/" || !freshFlags(m, unix.MS_RDONLY) {
		return t.refuse(m, field, maskGrant)
	}
	// A superblock CRIU mounts once: another mount of it would make this
	// one a bind of that one, contents and all.
	if len(t.byDev[m.GetRootDev()]) != 1 {
		return t.refuse(m, field, maskGrant+", on a superblock of its own")
	}
	dump, ok := t.im.tmpfsDump(m)
	if !ok {
		return nil // CRIU finds no content and fails the restore
	}
	if empty, err := tmpfsEmpty(dump); err != nil || !empty {
		return t.refuse(m, field, maskGrant+", holding nothing")
	}
	return nil
}

// checkReadOnly: a read-only path holds exactly a read-only bind of the
// file system it lies on, in place: the same superblock, type and source,
// its root the path within that file system, and the mount flags of the
// file system below kept (runc remounts with them).
func (t *mountTree) checkReadOnly(m *mnt.MntEntry) error {
	p, field := m.GetMountpoint(), "read-only path "+m.GetMountpoint()
	below := t.below(p)
	if m.GetExtKey() != "" || below == nil {
		return t.refuse(m, field, readOnlyGrant)
	}
	root := path.Join(below.GetRoot(), strings.TrimPrefix(p, below.GetMountpoint()))
	grant := fmt.Sprintf("a read-only bind of %s, root %q, in place (linux.readonlyPaths)", fsType(below), root)
	if m.GetRootDev() != below.GetRootDev() || m.GetFstype() != below.GetFstype() ||
		m.GetSource() != below.GetSource() || m.GetRoot() != root {
		return t.refuse(m, field, grant)
	}
	if m.GetFlags()&unix.MS_RDONLY == 0 {
		return t.refuse(m, field, grant)
	}
	for opt, flag := range restrictive {
		if freshFlags(below, flag) && m.GetFlags()&flag == 0 {
			return &Violation{Task: "the checkpoint", Field: field, Image: describeMount(m) + " without " + opt, Spec: grant + " with " + opt}
		}
	}
	return nil
}

// below is the mount that p lies on: the topmost at the deepest mount
// point above p.
func (t *mountTree) below(p string) *mnt.MntEntry {
	for q := path.Dir(p); ; q = path.Dir(q) {
		if ms := t.at[q]; len(ms) > 0 {
			return ms[len(ms)-1]
		}
		if q == "/" {
			return nil
		}
	}
}

// checkSpecMount: the spec's mount at this place. A bind is an external
// mount runc names to CRIU by its destination and maps to the spec's
// source at restore, so the entry must carry exactly that key. Any other
// type is a fresh mount of that file system, on a superblock of its own.
func (t *mountTree) checkSpecMount(m *mnt.MntEntry, sm specs.Mount) error {
	p, field := m.GetMountpoint(), "mount "+m.GetMountpoint()
	if isBind(sm) {
		if m.GetExtKey() != p {
			return t.refuse(m, field, fmt.Sprintf("the bind of %s (external mount %q)", sm.Source, p))
		}
		return checkOptions(m, sm, "bind of "+sm.Source, mountFlags)
	}
	grant := "a " + sm.Type + " mount"
	// A cgroup mount's root is the cgroup it shows, relative to CRIU's
	// cgroup namespace, not "/": which one is the cgroup check's.
	cgroup := sm.Type == "cgroup" || sm.Type == "cgroup2"
	if m.GetExtKey() != "" || !sameType(m, sm) || (m.GetRoot() != "/" && !cgroup) || t.sharesRoot(m) {
		return t.refuse(m, field, fmt.Sprintf("%s (source %q, root \"/\", a superblock of its own)", grant, sm.Source))
	}
	if !cgroup && m.GetSource() != sm.Source {
		return t.refuse(m, field, fmt.Sprintf("%s (source %q)", grant, sm.Source))
	}
	return checkOptions(m, sm, grant, freshFlags)
}

// sharesRoot: another mount of the same superblock from its root, which
// CRIU would mount once and bind the other from.
func (t *mountTree) sharesRoot(m *mnt.MntEntry) bool {
	for _, o := range t.byDev[m.GetRootDev()] {
		if o != m && o.GetRoot() == "/" {
			return true
		}
	}
	return false
}

// checkOptions: the mount is at least as restrictive as the spec's
// options. On cgroup v1 runc leaves the tmpfs that holds the controllers'
// mounts writable even for a read-only spec mount (the controllers' own
// mounts are read-only): an empty tmpfs of mount points grants nothing.
func checkOptions(m *mnt.MntEntry, sm specs.Mount, grant string, has func(*mnt.MntEntry, uint32) bool) error {
	for _, opt := range []string{"ro", "nosuid", "nodev", "noexec"} {
		if opt == "ro" && sm.Type == "cgroup" && m.GetFstype() == uint32(mnt.Fstype_TMPFS) {
			continue
		}
		if hasOption(sm, opt) && !has(m, restrictive[opt]) {
			return &Violation{Task: "the checkpoint", Field: "mount " + m.GetMountpoint(), Image: describeMount(m) + " without " + opt, Spec: grant + " with " + opt}
		}
	}
	return nil
}

// isConsole: runc binds the pty at /dev/console of a terminal container,
// outside the spec's mounts.
func (t *mountTree) isConsole(p string) bool {
	return p == "/dev/console" && t.spec.Process != nil && t.spec.Process.Terminal
}

var ptyRoot = regexp.MustCompile(`^/[0-9]+$`)

// checkConsole: /dev/console is a bind of one pty of the devpts mounted at
// /dev/pts, the container's own instance, which is checked as the spec's
// mount there.
func (t *mountTree) checkConsole(m *mnt.MntEntry) error {
	pts := t.at["/dev/pts"]
	if m.GetExtKey() != "" || m.GetFstype() != uint32(mnt.Fstype_DEVPTS) || !ptyRoot.MatchString(m.GetRoot()) || len(pts) != 1 ||
		pts[0].GetFstype() != uint32(mnt.Fstype_DEVPTS) || pts[0].GetRootDev() != m.GetRootDev() || pts[0].GetExtKey() != "" {
		return t.refuse(m, "mount /dev/console", consoleGrant)
	}
	return nil
}

// cgroupParent: on cgroup v1 runc mounts each controller directly below
// the spec's cgroup mount, on the tmpfs it mounts there.
func (t *mountTree) cgroupParent(p string) (specs.Mount, bool) {
	d := path.Dir(p)
	for _, sm := range t.want[d] {
		ms := t.at[d]
		if sm.Type == "cgroup" && len(ms) == 1 && ms[0].GetFstype() == uint32(mnt.Fstype_TMPFS) {
			return sm, true
		}
	}
	return specs.Mount{}, false
}

// checkController: a cgroup v1 controller's mount, fresh or the external
// mount runc names by its mount point; its root (which cgroup it shows) is
// the cgroup check's.
func (t *mountTree) checkController(m *mnt.MntEntry, sm specs.Mount) error {
	p := m.GetMountpoint()
	if m.GetFstype() != uint32(mnt.Fstype_CGROUP) || (m.GetExtKey() != "" && m.GetExtKey() != p) {
		return t.refuse(m, "mount "+p, "a cgroup v1 controller's mount (the spec's cgroup mount)")
	}
	has := freshFlags
	if m.GetExtKey() != "" {
		has = mountFlags
	}
	return checkOptions(m, sm, "a cgroup mount", has)
}

// checkSharing: CRIU binds the peers of a shared group, and the slaves of
// a master, from one another. A peer of another superblock would bring
// that one's contents, so peers must share the superblock.
func (t *mountTree) checkSharing(m *mnt.MntEntry) error {
	sh, ms := m.GetSharedId(), m.GetMasterId()
	if m.GetExtKey() != "" || (sh == 0 && ms == 0) {
		return nil
	}
	for _, o := range t.im.mounts {
		peer := sh != 0 && (o.GetSharedId() == sh || o.GetMasterId() == sh) || ms != 0 && o.GetSharedId() == ms
		if o != m && peer && o.GetRootDev() != m.GetRootDev() {
			return t.refuse(m, "mount "+m.GetMountpoint(), "no mount shared with "+o.GetMountpoint()+", another file system")
		}
	}
	return nil
}

// restrictive are the spec options whose absence would give the restored
// process more than the spec does.
var restrictive = map[string]uint32{"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC}

// freshFlags: CRIU mounts a fresh file system with the entry's superblock
// and mount flags together.
func freshFlags(m *mnt.MntEntry, flag uint32) bool {
	return (m.GetFlags()|m.GetSbFlags())&flag != 0
}

// mountFlags: a bind gets the entry's mount flags alone.
func mountFlags(m *mnt.MntEntry, flag uint32) bool {
	return m.GetFlags()&flag != 0
}

func isBind(sm specs.Mount) bool {
	return sm.Type == "bind" || hasOption(sm, "bind") || hasOption(sm, "rbind")
}

// sameType: the image's file system is the one the spec mounts there. A
// spec's cgroup mount is a tmpfs plus cgroup mounts on cgroup v1, and
// cgroup2 on v2; /dev/shm is a tmpfs the spec may call "shm".
func sameType(m *mnt.MntEntry, sm specs.Mount) bool {
	got := fsType(m)
	switch sm.Type {
	case "cgroup", "cgroup2":
		return got == "cgroup" || got == "cgroup2" || got == "tmpfs"
	case "shm":
		return got == "tmpfs"
	}
	return got == sm.Type
}

func fsType(m *mnt.MntEntry) string {
	return strings.ToLower(mnt.Fstype_name[int32(m.GetFstype())])
}

func hasOption(sm specs.Mount, opt string) bool {
	for _, o := range sm.Options {
		if o == opt {
			return true
		}
	}
	return false
}

// describeMount says what the image has: type, source, root, flags, and
// the external mount's key.
func describeMount(m *mnt.MntEntry) string {
	typ := fsType(m)
	if n := m.GetFsname(); n != "" {
		typ = n
	}
	flags := []string{"writable"}
	if freshFlags(m, unix.MS_RDONLY) {
		flags[0] = "read-only"
	}
	for _, opt := range []string{"nosuid", "nodev", "noexec"} {
		if freshFlags(m, restrictive[opt]) {
			flags = append(flags, opt)
		}
	}
	s := fmt.Sprintf("%s (source %q, root %q, %s", typ, m.GetSource(), m.GetRoot(), strings.Join(flags, ","))
	if k := m.GetExtKey(); k != "" {
		s += fmt.Sprintf(", external mount %q", k)
	}
	return s + ")"
}
