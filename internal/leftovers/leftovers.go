// Package leftovers removes what a failed runc restore left on the host:
// the processes in the container's cgroups, runc's mounts and state, and
// the cgroups themselves, in an order that cannot harm the container's
// rootfs; and it tells whether a container id is free to restore into.
package leftovers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ErrLeft is a failed restore whose container could not be removed
// entirely.
var ErrLeft = errors.New("what the failed restore left could not all be removed")

// KillWait bounds the wait for the processes of a failed restore to die:
// SIGKILL cannot be blocked, but a process in the middle of a system call
// that CRIU made it do (a page-in from a slow disk) finishes it first.
const KillWait = 10 * time.Second

// RuncContainer is a runc container whose `runc restore` failed: killed at
// the restore's deadline, or failed because CRIU crashed. runc moves CRIU
// into the container's cgroups before CRIU restores anything, and CRIU
// forks the restored processes there, so the cgroups hold everything the
// restore started. A runc that was killed also leaves its state directory
// (without state.json: `runc delete` cannot see the container) with
// "criu-root", its bind mount of the container's rootfs, in it.
type RuncContainer struct {
	ID     string
	Root   string // runc's --root: the container's state is Root/ID
	Cgroup string // the spec's cgroupsPath: a cgroupfs path, systemd's "slice:prefix:name", or ""
	// Delete runs `runc delete --force`, for a container whose state runc
	// wrote; nil: the state directory is removed here.
	Delete func(ctx context.Context) error
}

// InUse reports whether c's id names something on the host already: runc
// state, or processes in its cgroups. runc refuses to restore into such an
// id, and what is there is not the failed restore's to remove: a front end
// asks before it runs runc, and cleans up only after a restore into a free
// id.
func (c RuncContainer) InUse() bool {
	if c.Root != "" {
		if _, err := os.Lstat(filepath.Join(c.Root, c.ID)); err == nil {
			return true
		}
	}
	dirs, err := cgroupDirs(c.Cgroup, c.ID)
	if err != nil {
		return true
	}
	pids, err := cgroupPIDs(dirs)
	return err != nil || len(pids) > 0
}

// Remove removes what a failed restore left of c, in an
// order that cannot harm the container's rootfs: the processes in its
// cgroups first (CRIU, then anything it restored), then the mounts under
// runc's state directory, then runc's container (a state directory still
// holding criu-root would be removed through the bind mount, that is, in
// the rootfs), then the cgroups. The caller can then delete the container
// as after any other failed start.
func Remove(ctx context.Context, c RuncContainer) error {
	var errs []error
	dirs, err := cgroupDirs(c.Cgroup, c.ID)
	if err != nil {
		errs = append(errs, err)
	}
	if err := killCgroups(dirs); err != nil {
		errs = append(errs, err)
	}
	if err := removeRuncState(ctx, c); err != nil {
		errs = append(errs, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := removeCgroup(dirs[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrLeft, errors.Join(errs...))
	}
	return nil
}

// removeRuncState unmounts what runc mounted under the container's state
// directory, then deletes runc's container, or, where runc never wrote its
// state, the directory.
func removeRuncState(ctx context.Context, c RuncContainer) error {
	if c.Root == "" || c.ID == "" || strings.Contains(c.ID, "/") {
		return nil
	}
	dir := filepath.Join(c.Root, c.ID)
	if err := unmountUnder(dir); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "state.json")); err == nil && c.Delete != nil {
		if err := c.Delete(ctx); err != nil {
			return fmt.Errorf("runc delete --force %s: %w", c.ID, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove runc's state %s: %w", dir, err)
	}
	return nil
}

// unmountUnder detaches every mount point at or below dir, deepest first,
// and checks that none is left.
func unmountUnder(dir string) error {
	points := mountPointsUnder(dir)
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("unmount %s: %w", points[i], err)
		}
	}
	if left := mountPointsUnder(dir); len(left) > 0 {
		return fmt.Errorf("%s stays mounted", left[0])
	}
	return nil
}

// mountPointsUnder lists the mount points at or below dir, in mount order.
func mountPointsUnder(dir string) []string {
	var points []string
	for _, m := range mounts() {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			points = append(points, m.point)
		}
	}
	return points
}

// mount is one line of /proc/self/mountinfo.
type mount struct{ point, fstype, superOpts string }

func mounts() []mount {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ms []mount
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		sep := indexOf(f, "-")
		if len(f) < 5 || sep < 0 || sep+3 >= len(f) {
			continue
		}
		ms = append(ms, mount{point: unescapeMount(f[4]), fstype: f[sep+1], superOpts: f[sep+3]})
	}
	return ms
}

func indexOf(fields []string, s string) int {
	for i, f := range fields {
		if f == s {
			return i
		}
	}
	return -1
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
