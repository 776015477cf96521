package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// checkMounts checks the mounts CRIU would create from the image. Bind
// mounts of the spec are external to the image (runc names them to CRIU
// from the new spec, and CRIU refuses an external mount the spec lacks),
// so what the image itself brings are the kernel file systems and tmpfs
// mounts a runtime made: each must be one the spec mounts at that place,
// at least as read-only as the spec has it, or one of the spec's masked or
// read-only paths. And each of the spec's masked and read-only paths must
// still be masked or read-only: a privileged source has none, and its
// checkpoint would bring /proc/kcore or a writable /proc/sys back.
func checkMounts(im *image, spec *specs.Spec) error {
	want := specMounts(spec)
	masked, readonly := specPaths(spec)
	seen := map[string]*mnt.MntEntry{}
	for _, m := range im.mounts {
		p := path.Clean("/" + m.GetMountpoint())
		seen[p] = m
		if err := checkMount(im, m, p, want, masked, readonly); err != nil {
			return err
		}
	}
	if len(im.mounts) == 0 {
		return nil // no mount namespace of its own: checkNamespaces decides
	}
	return checkMasks(seen, masked, readonly)
}

func checkMount(im *image, m *mnt.MntEntry, p string, want map[string]specs.Mount, masked, readonly map[string]bool) error {
	if p == "/" || m.GetExtKey() != "" || m.GetExtMount() {
		return nil // the root, and the spec's own binds: runc supplies them
	}
	if masked[p] || readonly[p] || im.isMask(m) || im.readOnlyInPlace(m, p) {
		return nil // checkMasks checks how; a mask only hides
	}
	sm, ok := specMountAt(want, p)
	if !ok {
		return &Violation{Task: "the checkpoint", Field: "mount " + p, Image: describeMount(m), Spec: "no mount there"}
	}
	if !sameType(m, sm) {
		return &Violation{Task: "the checkpoint", Field: "mount " + p, Image: describeMount(m), Spec: "a " + sm.Type + " mount"}
	}
	for opt, flag := range restrictive {
		if opt == "ro" && cgroupV1Root(m, sm) {
			continue
		}
		if hasOption(sm, opt) && m.GetFlags()&flag == 0 && m.GetSbFlags()&flag == 0 {
			return &Violation{Task: "the checkpoint", Field: "mount " + p, Image: describeMount(m) + " without " + opt, Spec: "a " + sm.Type + " mount with " + opt}
		}
	}
	return nil
}

// checkMasks: every masked path of the spec has something mounted over it
// and every read-only path is mounted read-only.
func checkMasks(seen map[string]*mnt.MntEntry, masked, readonly map[string]bool) error {
	// In order: a refusal names the same path every time.
	for _, p := range slices.Sorted(maps.Keys(masked)) {
		if seen[p] == nil && !underMasked(p, seen) {
			return &Violation{Task: "the checkpoint", Field: "masked path " + p, Image: "not masked", Spec: "masked (linux.maskedPaths)"}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(readonly)) {
		m := seen[p]
		if m == nil && underMasked(p, seen) {
			continue
		}
		if m == nil || (m.GetFlags()&unix.MS_RDONLY == 0 && m.GetSbFlags()&unix.MS_RDONLY == 0) {
			return &Violation{Task: "the checkpoint", Field: "read-only path " + p, Image: "writable", Spec: "read-only (linux.readonlyPaths)"}
		}
	}
	return nil
}

// isMask: an empty read-only tmpfs, as runtimes mount over a directory to
// mask it. It hides what is below and holds nothing, so it grants nothing
// wherever it is.
func (im *image) isMask(m *mnt.MntEntry) bool {
	ro := m.GetFlags()&unix.MS_RDONLY != 0 || m.GetSbFlags()&unix.MS_RDONLY != 0
	if m.GetFstype() != uint32(mnt.Fstype_TMPFS) || !ro {
		return false
	}
	dump, ok := im.devTmpfs[m.GetRootDev()]
	if !ok {
		return true // CRIU dumped no content: it restores an empty tmpfs
	}
	n, err := tarEntries(dump, 2)
	return err == nil && n <= 1 // the root directory alone
}

// readOnlyInPlace: a read-only bind of part of a file system over the
// place where that part already shows (runtimes make /proc/sys read-only
// so). It takes writes away and adds nothing.
func (im *image) readOnlyInPlace(m *mnt.MntEntry, p string) bool {
	if m.GetFlags()&unix.MS_RDONLY == 0 {
		return false
	}
	for _, o := range im.mounts {
		if o != m && o.GetRootDev() == m.GetRootDev() && o.GetRoot() == "/" &&
			path.Join("/", o.GetMountpoint(), m.GetRoot()) == p {
			return true
		}
	}
	return false
}

// underMasked: a masked or read-only path with nothing over it is fine
// only where runc would have skipped it too, because it does not exist.
// Under /proc and /sys that is a fact of the kernel, the same on this host
// as in the container, so the host tells. Elsewhere (a path of the image's
// root file system) the images cannot tell, and the path passes when a
// read-only tmpfs masks a parent.
func underMasked(p string, seen map[string]*mnt.MntEntry) bool {
	if strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/") {
		_, err := os.Lstat(p)
		return errors.Is(err, fs.ErrNotExist)
	}
	for q := path.Dir(p); q != "/"; q = path.Dir(q) {
		if m := seen[q]; m != nil {
			return m.GetFstype() == uint32(mnt.Fstype_TMPFS) && m.GetFlags()&unix.MS_RDONLY != 0
		}
	}
	return true
}

// restrictive are the spec options whose absence would give the restored
// process more than the spec does.
var restrictive = map[string]uint32{"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC}

func specMounts(spec *specs.Spec) map[string]specs.Mount {
	out := map[string]specs.Mount{}
	for _, m := range spec.Mounts {
		out[path.Clean("/"+m.Destination)] = m
	}
	return out
}

// specMountAt finds the spec's mount at p. The spec's cgroup mount is a
// tree on cgroup v1 (a tmpfs with one mount per controller), so p may lie
// below it.
func specMountAt(want map[string]specs.Mount, p string) (specs.Mount, bool) {
	if m, ok := want[p]; ok {
		return m, true
	}
	for q := path.Dir(p); q != "/"; q = path.Dir(q) {
		if m, ok := want[q]; ok && m.Type == "cgroup" {
			return m, true
		}
	}
	return specs.Mount{}, false
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

// sameType: the image's file system is the one the spec mounts there. A
// spec's cgroup mount is a tmpfs plus cgroup mounts on cgroup v1, and
// cgroup2 on v2; /dev/shm is a tmpfs the spec may call "shm".
func sameType(m *mnt.MntEntry, sm specs.Mount) bool {
	got := strings.ToLower(mnt.Fstype_name[int32(m.GetFstype())])
	switch sm.Type {
	case "cgroup", "cgroup2":
		return got == "cgroup" || got == "cgroup2" || got == "tmpfs"
	case "shm":
		return got == "tmpfs"
	}
	return got == sm.Type
}

// cgroupV1Root: on cgroup v1 runc mounts a tmpfs at the spec's cgroup
// destination to hold one mount per controller, and leaves that tmpfs
// writable even for a read-only spec mount (the controllers' mounts are
// read-only). An empty tmpfs of mount points grants nothing.
func cgroupV1Root(m *mnt.MntEntry, sm specs.Mount) bool {
	return sm.Type == "cgroup" && m.GetFstype() == uint32(mnt.Fstype_TMPFS)
}

func hasOption(sm specs.Mount, opt string) bool {
	for _, o := range sm.Options {
		if o == opt {
			return true
		}
	}
	return false
}

func describeMount(m *mnt.MntEntry) string {
	typ := strings.ToLower(mnt.Fstype_name[int32(m.GetFstype())])
	if n := m.GetFsname(); n != "" {
		typ = n
	}
	rw := "rw"
	if m.GetFlags()&unix.MS_RDONLY != 0 || m.GetSbFlags()&unix.MS_RDONLY != 0 {
		rw = "ro"
	}
	return fmt.Sprintf("%s (%s, source %q)", typ, rw, m.GetSource())
}
