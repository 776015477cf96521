package criuaction

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// killWait bounds each wait of killRestored.
const killWait = 5 * time.Second

// killRestored kills the restored tree before any of it runs, and then
// CRIU. SIGKILL ends a ptrace-stopped task without returning it to user
// space. CRIU only logs a failed pre-resume script; its detach then fails
// and it kills the root and waits for it (cr-restore.c, out_kill), but a
// root that is its pid namespace's init waits in turn for its children,
// zombies that only CRIU, their tracer, may reap: both would wait for
// good. With CRIU gone, the kernel hands the zombies to their parents,
// the tree ends, runc sees CRIU fail and destroys the container, and the
// front end's cleanup of a failed restore runs. What CRIU would have
// undone on its way out, its cgroup yard, is unmounted here.
func killRestored(pids []int) error {
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill restored process %d: %w", pid, err))
		}
	}
	for _, pid := range pids {
		waitDead(pid)
	}
	criu := os.Getppid()
	if procfs.Comm(criu) != "criu" {
		return errors.Join(errs...) // not run by CRIU (a test): nothing more to end
	}
	yards := cgroupYards(criu)
	if err := syscall.Kill(criu, syscall.SIGKILL); err != nil {
		return errors.Join(append(errs, fmt.Errorf("kill CRIU %d: %w", criu, err))...)
	}
	for end := time.Now().Add(killWait); os.Getppid() == criu && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	for _, y := range yards {
		errs = append(errs, removeYard(y))
	}
	return errors.Join(errs...)
}

// waitDead waits until pid can run no more: exiting (PF_EXITING: a pid
// namespace's init waits so for its children), a zombie, or gone.
func waitDead(pid int) {
	for end := time.Now().Add(killWait); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if exiting(pid) {
			return
		}
	}
}

// pfExiting is the kernel's PF_EXITING task flag.
const pfExiting = 0x4

func exiting(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 7 {
		return true
	}
	flags, _ := strconv.ParseUint(f[6], 10, 64)
	return f[0] == "Z" || f[0] == "X" || flags&pfExiting != 0
}

// cgroupYards are the cgroup yards CRIU mounted in its working directory
// (cgroup.c, prepare_cgroup_sfd: .criu.cgyard.XXXXXX).
func cgroupYards(criu int) []string {
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(criu) + "/cwd")
	if err != nil {
		return nil
	}
	yards, _ := filepath.Glob(filepath.Join(cwd, ".criu.cgyard.*"))
	return yards
}

// removeYard unmounts a cgroup yard, its hierarchies first, and removes it.
func removeYard(yard string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == yard || strings.HasPrefix(f[4], yard+"/")) {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount CRIU's %s: %w", p, err))
		}
	}
	if err := os.Remove(yard); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
