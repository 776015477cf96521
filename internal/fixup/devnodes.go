package fixup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/cuda"
)

// SyncNodes makes the GPU device nodes of the restored container rooted at
// /proc/<pid>/root those of its spec. CRIU restores the container's /dev
// from the checkpoint, with the nodes of the GPUs the checkpoint ran on;
// the processes are about to be restored onto the GPUs the new spec gives,
// and the driver opens those by their nodes. A node the spec does not name
// is removed (the device cgroup denies it anyway), a missing one created.
func SyncNodes(pid int, nodes []specs.LinuxDevice) error {
	dev := fmt.Sprintf("/proc/%d/root/dev", pid)
	want := map[string]specs.LinuxDevice{}
	for _, d := range nodes {
		want[filepath.Base(d.Path)] = d
	}
	entries, err := os.ReadDir(dev)
	if err != nil {
		return fmt.Errorf("GPU device nodes of the restored container: %w", err)
	}
	for _, e := range entries {
		if _, gpu := cuda.NodeMinor("/dev/" + e.Name()); gpu && want[e.Name()].Path == "" {
			if err := os.Remove(filepath.Join(dev, e.Name())); err != nil {
				return fmt.Errorf("remove /dev/%s from the restored container: %w", e.Name(), err)
			}
		}
	}
	for name, d := range want {
		if err := makeNode(filepath.Join(dev, name), d); err != nil {
			return err
		}
	}
	return nil
}

func makeNode(path string, d specs.LinuxDevice) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(uint32(d.Major), uint32(d.Minor)) {
			return nil
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("replace %s: %w", path, err)
		}
	}
	mode := uint32(0o666)
	if d.FileMode != nil {
		mode = uint32(d.FileMode.Perm())
	}
	if err := unix.Mknod(path, unix.S_IFCHR|mode, int(unix.Mkdev(uint32(d.Major), uint32(d.Minor)))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s (%d:%d) in the restored container: %w", d.Path, d.Major, d.Minor, err)
	}
	uid, gid := 0, 0
	if d.UID != nil {
		uid = int(*d.UID)
	}
	if d.GID != nil {
		gid = int(*d.GID)
	}
	if err := os.Chown(path, uid, gid); err != nil {
		return err
	}
	return os.Chmod(path, os.FileMode(mode))
}
