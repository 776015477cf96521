package outcome

import (
	"strings"
)

// ReadCgroups reads a /proc/PID/cgroup file into Want.Cgroups' form.
func ReadCgroups(path string) (map[string]string, error) {
	data, err := readProc(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// id:controllers:path; the path may itself hold ':'.
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 {
			out[f[0]+":"+f[1]] = f[2]
		}
	}
	return out, nil
}

// cgroups checks that each of the thread's hierarchies holds it at the
// container's cgroup or below it, compared as the kernel writes the paths
// (no trimming, no cleaning: a path is below base when it is base or
// starts with base and a slash).
func (c *checker) cgroups(t taskRef) error {
	got, err := ReadCgroups(t.file("cgroup"))
	if err != nil {
		return err
	}
	for h, p := range got {
		base, ok := c.w.Cgroups[h]
		if !ok {
			return violation(t, "cgroup "+h, p, "no such hierarchy in the container's cgroups")
		}
		if !below(p, base) {
			return violation(t, "cgroup "+h, p, base+" or below it")
		}
	}
	return nil
}

func below(p, base string) bool {
	if p == base {
		return true
	}
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return strings.HasPrefix(p, base+"/") && !strings.Contains(p[len(base):], "/../")
}
