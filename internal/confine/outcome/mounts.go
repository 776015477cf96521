package outcome

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// mountEntry is one line of /proc/PID/mountinfo, as far as the check needs.
type mountEntry struct {
	root, point, fstype string
	opts                []string // the per-mount options: ro, nosuid, nodev, noexec, …
}

func (m mountEntry) has(opt string) bool { return slices.Contains(m.opts, opt) }

// readMountinfo parses a mountinfo file; the kernel escapes spaces and
// other odd bytes in paths as octal (\040), which unescape undoes.
func readMountinfo(file string) ([]mountEntry, error) {
	data, err := readProc(file)
	if err != nil {
		return nil, err
	}
	var out []mountEntry
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 6 || sep < 6 || sep+1 >= len(f) {
			return nil, fmt.Errorf("outcome: %s: unexpected line %q", file, line)
		}
		out = append(out, mountEntry{root: unescape(f[3]), point: unescape(f[4]), fstype: f[sep+1], opts: strings.Split(f[5], ",")})
	}
	return out, nil
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var n int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%3o", &n); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// kernelFS are the file systems that expose the kernel itself: a mount of
// one is a right only where the spec mounts that type.
var kernelFS = []string{"proc", "sysfs", "devtmpfs", "binfmt_misc", "debugfs", "securityfs", "tracefs", "bpf", "configfs", "fusectl"}

// mounts checks the root task's mount table against the spec: kernel file
// systems only where the spec mounts them, masked paths masked, read-only
// paths read-only, and the spec's mount flags kept. It compares structure
// (type, root, flags), never sources, which CRIU's images could name.
func (c *checker) mounts(t taskRef) error {
	ms, err := readMountinfo(t.file("mountinfo"))
	if err != nil {
		return err
	}
	sp := c.w.Spec
	for _, m := range ms {
		if m.fstype == "devtmpfs" && m.root != "/" && c.allowedNode(t, m.point) {
			continue // runc's bind of one device node the container has (a /dev/null mask)
		}
		if err := kernelMount(t, sp, m); err != nil {
			return err
		}
	}
	for _, m := range sp.Mounts {
		if err := specFlags(t, ms, m); err != nil {
			return err
		}
	}
	if sp.Linux == nil {
		return nil
	}
	for _, p := range sp.Linux.MaskedPaths {
		if err := masked(t, ms, p); err != nil {
			return err
		}
	}
	for _, p := range sp.Linux.ReadonlyPaths {
		if err := readOnly(t, ms, p); err != nil {
			return err
		}
	}
	return nil
}

// kernelMount allows a kernel file system at a spec destination of its
// type, or a bind of a part of one onto the same place (runc's read-only
// paths: /proc/sys bound onto /proc/sys) when it is read-only.
func kernelMount(t taskRef, sp *specs.Spec, m mountEntry) error {
	if !slices.Contains(kernelFS, m.fstype) {
		return nil
	}
	for _, s := range sp.Mounts {
		if s.Type != m.fstype {
			continue
		}
		if path.Join(s.Destination, m.root) == m.point && (m.root == "/" || m.has("ro")) {
			return nil
		}
	}
	return violation(t, "mount "+m.point, fmt.Sprintf("%s (root %s, %s)", m.fstype, m.root, strings.Join(m.opts, ",")),
		"no "+m.fstype+" mount there")
}

// top is the mount that is seen at p: the last one mounted there, or,
// with exact false, the last one of the longest mount point above p.
func top(ms []mountEntry, p string, exact bool) (mountEntry, bool) {
	var best mountEntry
	found := false
	for _, m := range ms {
		if m.point == p || (!exact && (m.point == "/" || strings.HasPrefix(p, m.point+"/"))) {
			if !found || len(m.point) >= len(best.point) {
				best, found = m, true
			}
		}
	}
	return best, found
}

// specFlags checks that the mount at a spec destination kept the flags the
// spec asks for.
func specFlags(t taskRef, ms []mountEntry, s specs.Mount) error {
	d := path.Clean(s.Destination)
	m, ok := top(ms, d, true)
	if !ok {
		// A spec mount the checkpoint did not have grants nothing by its
		// absence: what is seen there is the container's own file system
		// (a bind's ro protects its source, which is not there; a kernel
		// file system elsewhere, a masked or read-only path, and /dev's
		// nodes have checks of their own).
		return nil
	}
	targets := []mountEntry{m}
	if s.Type == "cgroup" && m.fstype == "tmpfs" {
		// cgroup v1: runc mounts a tmpfs there and applies the spec's
		// flags to the hierarchies it binds below it.
		targets = nil
		for _, c := range ms {
			if path.Dir(c.point) == d && (c.fstype == "cgroup" || c.fstype == "cgroup2") {
				targets = append(targets, c)
			}
		}
	}
	for _, m := range targets {
		for _, f := range []string{"ro", "nosuid", "nodev", "noexec"} {
			if slices.Contains(s.Options, f) && !m.has(f) {
				return violation(t, "mount "+s.Destination, fmt.Sprintf("%s (%s at %s)", strings.Join(m.opts, ","), m.fstype, m.point), "mounted with "+f)
			}
		}
	}
	return nil
}

// masked checks that p is covered by an empty read-only tmpfs or by a
// bind of /dev/null (runc's maskPath), or does not exist at all.
func masked(t taskRef, ms []mountEntry, p string) error {
	m, ok := top(ms, path.Clean(p), true)
	if ok && m.fstype == "tmpfs" && m.has("ro") && m.root == "/" && emptyDir(t, p) {
		return nil
	}
	if ok && path.Base(m.root) == "null" && isNull(t, p) {
		return nil
	}
	if !ok && !exists(t, p) {
		return nil
	}
	got := "not masked"
	if ok {
		got = fmt.Sprintf("%s (root %s, %s)", m.fstype, m.root, strings.Join(m.opts, ","))
	}
	return violation(t, "masked path "+p, got, "masked (an empty read-only tmpfs or /dev/null)")
}

// readOnly checks that the mount seen at p is read-only, unless p does
// not exist.
func readOnly(t taskRef, ms []mountEntry, p string) error {
	m, ok := top(ms, path.Clean(p), false)
	if ok && m.has("ro") {
		return nil
	}
	if !exists(t, p) {
		return nil
	}
	return violation(t, "read-only path "+p, "writable ("+m.fstype+" at "+m.point+")", "read-only")
}

// exists is whether p exists in the task's root, resolved inside it.
func exists(t taskRef, p string) bool {
	fd, err := openIn(t, p, unix.O_PATH)
	if err == nil {
		unix.Close(fd)
		return true
	}
	return !errors.Is(err, unix.ENOENT)
}

// allowedNode is whether p, in the task's root, is a device node the
// container may have.
func (c *checker) allowedNode(t taskRef, p string) bool {
	d, ok := nodeAt(t, p)
	return ok && c.allowed(d)
}

// nodeAt is the device node at p in the task's root, if it is one.
func nodeAt(t taskRef, p string) (devNode, bool) {
	fd, err := openIn(t, p, unix.O_PATH)
	if err != nil {
		return devNode{}, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return devNode{}, false
	}
	return nodeOf(&st)
}

// isNull is whether p, in the task's root, is the null device.
func isNull(t taskRef, p string) bool {
	d, ok := nodeAt(t, p)
	return ok && d == devNode{'c', 1, 3}
}

// emptyDir is whether p, in the task's root, is an empty directory.
func emptyDir(t taskRef, p string) bool {
	fd, err := openIn(t, p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && err != nil
}

// openIn opens p inside the task's root (its /proc/PID/root), so that no
// symlink of the container's leads out of it.
func openIn(t taskRef, p string, flags int) (int, error) {
	root, err := unix.Open(t.file("root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	return unix.Openat2(root, p, &unix.OpenHow{Flags: uint64(flags) | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
}
