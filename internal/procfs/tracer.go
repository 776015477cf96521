package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Tracer is the pid that ptrace-holds a thread of pid (a cryo driver
// call under way holds every thread while it runs, a debugger or CRIU
// may hold some), 0 if no thread is traced or pid is gone.
func Tracer(pid int) int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	for _, status := range tasks {
		if t := tracerIn(status); t > 0 {
			return t
		}
	}
	return 0
}

// ThreadTracer is the pid that ptrace-holds thread tid, 0 if none.
func ThreadTracer(tid int) int {
	return tracerIn("/proc/" + strconv.Itoa(tid) + "/status")
}

// tracerIn is the TracerPid field of a status file, 0 if unreadable.
func tracerIn(status string) int {
	v, _ := statusField(status, "TracerPid")
	n, _ := strconv.Atoi(v)
	return n
}

// Comm is the command name of pid (/proc/PID/comm), "" if gone.
func Comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}
