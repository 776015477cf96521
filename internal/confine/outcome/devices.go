package outcome

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// devNode is a device number with its kind ('c' or 'b').
type devNode struct {
	kind         byte
	major, minor uint32
}

func (d devNode) String() string { return fmt.Sprintf("%c %d:%d", d.kind, d.major, d.minor) }

// runcDefaults are the device nodes runc gives every container, whatever
// its spec: null, zero, full, random, urandom, tty, console and ptmx, and
// the pseudo-terminals of its devpts (major 136, any minor).
var runcDefaults = []devNode{{'c', 1, 3}, {'c', 1, 5}, {'c', 1, 7}, {'c', 1, 8}, {'c', 1, 9}, {'c', 5, 0}, {'c', 5, 1}, {'c', 5, 2}}

// allowed is whether the spec (or runc's defaults) gives the container d.
func (c *checker) allowed(d devNode) bool {
	if d.kind == 'c' && d.major == 136 {
		return true
	}
	for _, a := range runcDefaults {
		if a == d {
			return true
		}
	}
	if c.w.Spec.Linux == nil {
		return false
	}
	for _, sd := range c.w.Spec.Linux.Devices {
		kind := byte('c')
		if sd.Type == "b" {
			kind = 'b'
		}
		if kind == d.kind && sd.Major == int64(d.major) && sd.Minor == int64(d.minor) {
			return true
		}
	}
	return false
}

// nodeOf is the device a stat result names, if it is a device node.
func nodeOf(st *unix.Stat_t) (devNode, bool) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return devNode{'c', unix.Major(st.Rdev), unix.Minor(st.Rdev)}, true
	case unix.S_IFBLK:
		return devNode{'b', unix.Major(st.Rdev), unix.Minor(st.Rdev)}, true
	}
	return devNode{}, false
}

// fds checks the device nodes the process holds open: a node the spec
// does not give the container, restored as an open file, is as good as
// the node in its /dev. CRIU restores one file table per process (its
// threads share it), so the process's listing covers its threads.
func (c *checker) fds(t taskRef) error {
	dir := t.file("fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("outcome: read %s: %w", dir, err)
	}
	for _, e := range ents {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			continue // not stat-able: it names no node
		}
		if d, ok := nodeOf(&st); ok && !c.allowed(d) {
			return violation(t, "open file "+e.Name()+" (a device node)", d.String(), "only the spec's devices and runc's defaults")
		}
	}
	return nil
}

// maxDevEntries bounds the walk of /dev: a /dev with more entries than any
// container's is refused rather than walked for long.
const maxDevEntries = 20000

// devNodes walks the root task's /dev, inside its root and without
// following a symlink, and checks every device node there.
func (c *checker) devNodes(t taskRef) error {
	dev, err := openIn(t, "/dev", unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("outcome: open /dev of %s: %w", t.label(), err)
	}
	n := 0
	return c.walkDev(t, dev, "/dev", &n)
}

// walkDev checks the directory dir (an open fd it closes) and below.
func (c *checker) walkDev(t taskRef, dir int, path string, n *int) error {
	f := os.NewFile(uintptr(dir), path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("outcome: read %s of %s: %w", path, t.label(), err)
	}
	for _, name := range names {
		if *n++; *n > maxDevEntries {
			return violation(t, "/dev", fmt.Sprintf("more than %d entries", maxDevEntries), "a container's /dev")
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		p := path + "/" + name
		if d, ok := nodeOf(&st); ok && !c.allowed(d) {
			return violation(t, "device node "+p, d.String(), "only the spec's devices and runc's defaults")
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("outcome: open %s of %s: %w", p, t.label(), err)
		}
		if err := c.walkDev(t, sub, p, n); err != nil {
			return err
		}
	}
	return nil
}
