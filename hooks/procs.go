package hooks

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// startTime is field 22 of /proc/<pid>/stat; with the pid it names a
// process uniquely, so a reused pid is not mistaken for CRIU.
func startTime(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// frozen reports whether pid sits in a frozen cgroup (v1 freezer or v2
// cgroup.freeze), where a driver call would hang.
func frozen(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "freezer" {
			st, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/freezer", parts[2], "freezer.state"))
			if s := strings.TrimSpace(string(st)); s != "" && s != "THAWED" {
				return true
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
				st, _ := os.ReadFile(filepath.Join(root, parts[2], "cgroup.freeze"))
				if strings.TrimSpace(string(st)) == "1" {
					return true
				}
			}
		}
	}
	return false
}
