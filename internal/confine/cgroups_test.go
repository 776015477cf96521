package confine

import (
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
	"google.golang.org/protobuf/proto"
)

// editCgroups rewrites the test checkpoint's cgroup.img: dir sets every
// controller's top directory name, member every set member (nil: leave).
func editCgroups(t *testing.T, dir func(string) string, member func(*cgroup.CgMemberEntry)) string {
	t.Helper()
	d := copyImages(t)
	edit(t, d, "cgroup.img", &cgroup.CgroupEntry{}, func(m proto.Message) {
		cg := m.(*cgroup.CgroupEntry)
		for _, c := range cg.GetControllers() {
			for _, e := range c.GetDirs() {
				if dir != nil {
					n := dir(e.GetDirName())
					e.DirName = &n
				}
			}
		}
		for _, set := range cg.GetSets() {
			for _, ctl := range set.GetCtls() {
				if member != nil {
					member(ctl)
				}
			}
		}
	})
	return d
}

func setPath(p string) func(*cgroup.CgMemberEntry) {
	return func(m *cgroup.CgMemberEntry) { m.Path = proto.String(p) }
}

// The crafted images of the issue, each of which CRIU's raw prefix test
// (strstartswith(path + 1, dir_name)) does not rewrite into the new
// container's cgroup, or rewrites beside it.
func TestCgroupCRIURule(t *testing.T) {
	for name, c := range map[string]struct {
		dir    func(string) string
		member func(*cgroup.CgMemberEntry)
		want   string
	}{
		// dir_name "/" and member "/": "" does not start with "/", so CRIU
		// moves every task into the host's root cgroups.
		"root slash": {func(string) string { return "/" }, setPath("/"), `CRIU would move the task into "/" of the host`},
		// a leading "/" on the directory only: never a prefix of path + 1.
		"leading slash": {func(d string) string { return "/" + d }, nil, "no cgroup directory of the image prefixes"},
		// the directory string prefixes a sibling's name: "/cf10" → root + "0".
		"sibling": {nil, setPath("/cf10"), "beside the container's cgroup"},
		// an empty directory prefixes everything: root + "cf1".
		"empty dir": {func(string) string { return "" }, nil, "beside the container's cgroup"},
		// a NUL ends CRIU's string: "x\x00cf1" is "x" there, which
		// prefixes no path, though Go sees "cf1" in it.
		"nul dir": {func(d string) string { return "x\x00" + d }, nil, "no cgroup directory of the image prefixes"},
		// a namespace prefix that splits a name: "/cf1x" cut at 3 → root + "1x".
		"cgns split":  {nil, func(m *cgroup.CgMemberEntry) { m.Path = proto.String("/cf1x"); m.CgnsPrefix = proto.Uint32(3) }, "beside the container's cgroup"},
		"cgns beyond": {nil, func(m *cgroup.CgMemberEntry) { m.CgnsPrefix = proto.Uint32(99) }, "cannot parse"},
		"cgns zero":   {nil, func(m *cgroup.CgMemberEntry) { m.CgnsPrefix = proto.Uint32(0) }, "prefix of 0 bytes"},
		"empty path":  {nil, setPath(""), "cannot parse"},
	} {
		t.Run(name, func(t *testing.T) {
			refused(t, Check(editCgroups(t, c.dir, c.member), runcSpec(t)), "cgroup path", c.want)
		})
	}
}

// What CRIU does rewrite into the container's cgroup passes: a namespaced
// path (the prefix is replaced by the new root), a child cgroup, and a
// path whose first byte is not a slash (CRIU skips it unread).
func TestCgroupCRIURuleAccepts(t *testing.T) {
	for name, member := range map[string]func(*cgroup.CgMemberEntry){
		"cgns": func(m *cgroup.CgMemberEntry) { m.CgnsPrefix = proto.Uint32(uint32(len(m.GetPath()))) },
		"cgns child": func(m *cgroup.CgMemberEntry) {
			m.CgnsPrefix = proto.Uint32(uint32(len(m.GetPath())))
			m.Path = proto.String(m.GetPath() + "/w")
		},
		"child":      func(m *cgroup.CgMemberEntry) { m.Path = proto.String(m.GetPath() + "/w") },
		"first byte": func(m *cgroup.CgMemberEntry) { m.Path = proto.String("x" + m.GetPath()[1:]) },
	} {
		t.Run(name, func(t *testing.T) {
			if err := Check(editCgroups(t, nil, member), runcSpec(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// CRIU chowns the container's existing cgroup directory to the image's
// owner in its default mode: a delegation the spec does not grant.
func TestCgroupDirOwner(t *testing.T) {
	d := copyImages(t)
	edit(t, d, "cgroup.img", &cgroup.CgroupEntry{}, func(m proto.Message) {
		for _, c := range m.(*cgroup.CgroupEntry).GetControllers() {
			for _, e := range c.GetDirs() {
				e.DirPerms.Uid = proto.Uint32(1000)
			}
		}
	})
	refused(t, Check(d, runcSpec(t)), "cgroup directory", "owned by 1000:0")
}

// cgroupContains matches CRIU's: a co-mounted hierarchy's member holds each
// of its controllers, a name is not matched by a longer one it starts, and
// the v2 controller (one empty name) holds the empty name alone.
func TestCgroupContains(t *testing.T) {
	for _, c := range []struct {
		ctls []string
		name string
		want bool
	}{
		{[]string{"cpu", "cpuacct"}, "cpu,cpuacct", true},
		{[]string{"cpu"}, "cpuacct", false},
		{[]string{"cpuacct"}, "cpu,cpuacct", true},
		{[]string{"cpu"}, "cpuacct,cpu", true},
		{[]string{""}, "", true},
		{[]string{""}, "memory", false},
		{[]string{"memory"}, "", false},
		{nil, "memory", false},
		{[]string{"name=systemd"}, "name=systemd", true},
	} {
		if got := cgroupContains(c.ctls, c.name); got != c.want {
			t.Errorf("cgroupContains(%q, %q) = %v, want %v", c.ctls, c.name, got, c.want)
		}
	}
}
