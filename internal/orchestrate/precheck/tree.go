package precheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ShellJob refuses, unless shellJob is set, a tree CRIU would dump only as
// a shell job: a root that is not the leader of its session, or a process
// with stdin, stdout or stderr on a terminal (CRIU: "Task attached to shell
// terminal", after the GPU was already suspended).
func ShellJob(root int, pids []int, shellJob bool) error {
	if shellJob {
		return nil
	}
	const remedy = "add --shell-job (and give it at restore too)"
	if sid := statField(root, 5); sid != "" && sid != strconv.Itoa(root) {
		return &Error{Err: ErrShellJob, Remedy: remedy,
			Detail: fmt.Sprintf("pid %d (%s) is not the leader of its session %s (%s): it was started from a shell", root, comm(root), sid, comm(atoi(sid)))}
	}
	for _, pid := range pids {
		for fd := 0; fd <= 2; fd++ {
			link, err := os.Readlink(filepath.Join(procRoot, strconv.Itoa(pid), "fd", strconv.Itoa(fd)))
			if err == nil && isTerminal(link) {
				return &Error{Err: ErrShellJob, Remedy: remedy,
					Detail: fmt.Sprintf("pid %d (%s) has its %s on the terminal %s", pid, comm(pid), stdName[fd], link)}
			}
		}
	}
	return nil
}

var stdName = [...]string{"stdin", "stdout", "stderr"}

func isTerminal(path string) bool {
	return strings.HasPrefix(path, "/dev/pts/") || strings.HasPrefix(path, "/dev/tty") || path == "/dev/console"
}

// statField is field n (1-based, as proc(5) counts) of /proc/PID/stat.
func statField(pid, n int) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // comm may hold spaces and parentheses
	if i < 0 || n < 3 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if n-3 >= len(f) {
		return ""
	}
	return f[n-3]
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// HostProcess refuses a pid that lives in a container (another pid or
// mount namespace than this process's): the bare checkpoint would dump it
// without its container, and CRIU cannot restore it outside one.
func HostProcess(pid int) error {
	for _, ns := range []string{"pid", "mnt"} {
		self, err1 := os.Readlink(filepath.Join(procRoot, "self", "ns", ns))
		its, err2 := os.Readlink(filepath.Join(procRoot, strconv.Itoa(pid), "ns", ns))
		if err1 != nil || err2 != nil || self == its {
			continue
		}
		return &Error{Err: ErrInContainer,
			Detail: fmt.Sprintf("pid %d (%s) is in a container (its %s namespace is %s, cryo's %s; cgroup %s)", pid, comm(pid), ns, its, self, cgroup(pid)),
			Remedy: "checkpoint the container through its runtime with cryo: `podman container checkpoint NAME` (runtime cryo-runc) or `ctr task checkpoint ID` (runtime io.containerd.cryo.v2)"}
	}
	return nil
}

// cgroup is the process's cgroup path, which names its container.
func cgroup(pid int) string {
	b, _ := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[2] != "/" {
			return parts[2]
		}
	}
	return "unknown"
}
