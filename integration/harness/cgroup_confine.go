package harness

import (
	"os"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
	"google.golang.org/protobuf/proto"
)

// Crafted is cgroup.img edited by dir (each controller's top directory
// name) and path (each set member's path).
func Crafted(t *testing.T, img string, dir, path func(string) string) string {
	t.Helper()
	edited := CopyDir(t, img)
	EditImage(t, edited, "cgroup.img", &cgroup.CgroupEntry{}, func(m proto.Message) {
		cg := m.(*cgroup.CgroupEntry)
		for _, c := range cg.GetControllers() {
			for _, d := range c.GetDirs() {
				d.DirName = proto.String(dir(d.GetDirName()))
			}
		}
		for _, set := range cg.GetSets() {
			for _, ctl := range set.GetCtls() {
				ctl.Path = proto.String(path(ctl.GetPath()))
			}
		}
	})
	return edited
}

func Same(s string) string { return s }

// MountedHierarchies are the controller fields of /proc/PID/cgroup of the
// hierarchies mounted on the host. Only named hierarchies can be left
// unmounted while tasks still list them, so the rest count as mounted.
func MountedHierarchies(t *testing.T) func(string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		_, post, ok := strings.Cut(l, " - ")
		f := strings.Fields(post)
		if !ok || len(f) < 3 || f[0] != "cgroup" {
			continue
		}
		for _, o := range strings.Split(f[2], ",") {
			if strings.HasPrefix(o, "name=") {
				names[o] = true
			}
		}
	}
	return func(ctl string) bool { return !strings.HasPrefix(ctl, "name=") || names[ctl] }
}
