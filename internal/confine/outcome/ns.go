package outcome

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// nsNames maps the spec's namespace types to /proc/PID/ns names.
var nsNames = map[specs.LinuxNamespaceType]string{
	specs.PIDNamespace: "pid", specs.NetworkNamespace: "net", specs.MountNamespace: "mnt", specs.IPCNamespace: "ipc",
	specs.UTSNamespace: "uts", specs.UserNamespace: "user", specs.CgroupNamespace: "cgroup", specs.TimeNamespace: "time",
}

// HostNamespaces reads the namespaces of the given /proc/PID directories
// (the host's init, cryo's own), for Want.HostNS.
func HostNamespaces(dirs ...string) map[string][]uint64 {
	out := map[string][]uint64{}
	for _, name := range nsNames {
		for _, d := range dirs {
			if ino, err := nsInode(filepath.Join(d, "ns", name)); err == nil {
				out[name] = append(out[name], ino)
			}
		}
	}
	return out
}

// nsInode reads a namespace link ("net:[4026531840]").
func nsInode(path string) (uint64, error) {
	l, err := os.Readlink(path)
	if err != nil {
		return 0, fmt.Errorf("outcome: %w", err)
	}
	i, j := strings.IndexByte(l, '['), strings.IndexByte(l, ']')
	if i < 0 || j < i {
		return 0, fmt.Errorf("outcome: %s: unexpected link %q", path, l)
	}
	return strconv.ParseUint(l[i+1:j], 10, 64)
}

// namespaces checks each namespace the spec names: one the spec joins by
// path is that namespace; one it creates is not the host's, and is the
// root task's, so that no task of the tree sits elsewhere.
func (c *checker) namespaces(t taskRef) error {
	if c.w.Spec.Linux == nil {
		return nil
	}
	for _, ns := range c.w.Spec.Linux.Namespaces {
		name, ok := nsNames[ns.Type]
		if !ok {
			continue
		}
		got, err := nsInode(t.file(filepath.Join("ns", name)))
		if err != nil {
			return err
		}
		if err := c.namespace(t, name, ns.Path, got); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) namespace(t taskRef, name, path string, got uint64) error {
	field := name + " namespace"
	if path != "" {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			return fmt.Errorf("outcome: the spec's %s %s: %w", field, path, err)
		}
		if st.Ino != got {
			return violation(t, field, fmt.Sprint(got), fmt.Sprintf("%s (%d)", path, st.Ino))
		}
		return nil
	}
	for _, h := range c.w.HostNS[name] {
		if h == got {
			return violation(t, field, fmt.Sprintf("the host's (%d)", got), "a namespace of its own")
		}
	}
	if root, ok := c.rootNS[name]; !ok {
		c.rootNS[name] = got
	} else if root != got {
		return violation(t, field, fmt.Sprint(got), fmt.Sprintf("the container's (%d)", root))
	}
	return nil
}
