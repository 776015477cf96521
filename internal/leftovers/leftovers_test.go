package leftovers

import "testing"

func TestCgroupRel(t *testing.T) {
	for _, c := range []struct{ path, id, want string }{
		{"/kubepods/pod1/abc", "abc", "/kubepods/pod1/abc"},
		{"/a/../b//c", "c", "/b/c"},
		{"", "abc", "abc"},
		{"sub/abc", "abc", "sub/abc"},
		{"kubepods-burstable-pod1.slice:cri-containerd:abc", "abc", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-abc.scope"},
		{":libpod:abc", "abc", "/system.slice/libpod-abc.scope"},
		{"-.slice::abc", "abc", "/abc.scope"},
		{"user.slice::child.slice", "x", "/user.slice/child.slice"},
	} {
		got, err := cgroupRel(c.path, c.id)
		if err != nil || got != c.want {
			t.Errorf("cgroupRel(%q, %q) = %q, %v; want %q", c.path, c.id, got, err, c.want)
		}
	}
	for _, bad := range []string{"..", "../x", "."} {
		if got, err := cgroupRel(bad, "x"); err == nil {
			t.Errorf("cgroupRel(%q) = %q, want an error: it names no cgroup of the container", bad, got)
		}
	}
}

func TestHierarchyKey(t *testing.T) {
	for _, c := range []struct {
		m    mount
		want string
	}{
		{mount{fstype: "cgroup", superOpts: "rw,cpu,cpuacct"}, "cpu,cpuacct"},
		{mount{fstype: "cgroup", superOpts: "rw,xattr,name=systemd"}, "name=systemd"},
		{mount{fstype: "cgroup", superOpts: "rw,noprefix,clone_children,cpuset"}, "cpuset"},
		{mount{fstype: "cgroup2", superOpts: "rw,nsdelegate"}, ""},
	} {
		if got := hierarchyKey(c.m); got != c.want {
			t.Errorf("hierarchyKey(%+v) = %q, want %q", c.m, got, c.want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/run/a\040b/c`); got != "/run/a b/c" {
		t.Errorf("unescapeMount: %q", got)
	}
}
