package procfs

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// StatusField is the value of key ("NSpid", "TracerPid") in
// /proc/PID/status, trimmed; false when pid is gone or has no such field.
func StatusField(pid int, key string) (string, bool) {
	return statusField("/proc/"+strconv.Itoa(pid)+"/status", key)
}

// statusField reads key from one status file (a process's or a thread's).
func statusField(path, key string) (string, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// Environ is the environment pid started with (/proc/PID/environ).
// Variables a process sets for itself later (Python's os.environ) are not
// there.
func Environ(pid int) (map[string]string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

// NSPID is pid's number in its innermost pid namespace (the last NSpid
// field): a container restores its processes with those numbers, so they
// identify a process across a restore. pid itself when unknown.
func NSPID(pid int) int {
	v, _ := StatusField(pid, "NSpid")
	if f := strings.Fields(v); len(f) > 0 {
		if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
			return n
		}
	}
	return pid
}
