package procfs

import (
	"os"
	"strconv"
	"strings"
)

// Cgroup is one line of /proc/PID/cgroup: a hierarchy and pid's cgroup in
// it.
type Cgroup struct {
	// ID is the hierarchy's number: "0" for cgroup v2's.
	ID string
	// Controllers name the hierarchy as the file does ("cpu,cpuacct",
	// "name=systemd"); "" for cgroup v2's unified hierarchy.
	Controllers string
	Path        string
}

// Cgroups are pid's cgroups, one per hierarchy, in the file's order.
func Cgroups(pid int) ([]Cgroup, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil, err
	}
	var out []Cgroup
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 {
			out = append(out, Cgroup{ID: f[0], Controllers: f[1], Path: f[2]})
		}
	}
	return out, nil
}
