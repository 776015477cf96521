package criuimg

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
)

// mounts reads every dumped mount namespace (mountpoints-<ns id>.img). A
// process dumped in the host's mount namespace has none: CRIU dumps a
// namespace only when the tree has its own.
func (r *reader) mounts() error {
	names, err := filepath.Glob(filepath.Join(r.dir, "mountpoints-*.img"))
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, path := range names {
		name := filepath.Base(path)
		ns, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "mountpoints-"), ".img"))
		entries, err := readImage(r.dir, name, &mnt.MntEntry{})
		if err != nil {
			return err
		}
		for _, e := range entries {
			m := e.(*mnt.MntEntry)
			r.details.Mounts = append(r.details.Mounts, Mount{Namespace: ns, ID: int(m.GetMntId()), ParentID: int(m.GetParentMntId()),
				MountPoint: m.GetMountpoint(), FSType: fsType(m), Source: m.GetSource(), Options: m.GetOptions(), Root: bindRoot(m)})
		}
	}
	return nil
}

// fsType names a mount's file system: CRIU's own name for the types it
// knows, else the name it recorded (fsname), else "unsupported".
func fsType(m *mnt.MntEntry) string {
	if n := m.GetFsname(); n != "" {
		return n
	}
	if n, ok := mnt.Fstype_name[int32(m.GetFstype())]; ok {
		return strings.ToLower(n)
	}
	return fmt.Sprint("fstype ", m.GetFstype())
}

// memory sums the dumped memory: the processes' page maps, and the pages
// images' sizes (which count shared memory too), from their size alone.
func (r *reader) memory() error {
	for _, p := range r.details.Processes {
		r.details.Memory.PagesBytes += p.PagesBytes
	}
	names, err := filepath.Glob(filepath.Join(r.dir, "pages-*.img"))
	if err != nil {
		return err
	}
	for _, path := range names {
		if st, err := os.Stat(path); err == nil {
			r.details.Memory.PagesFileBytes += st.Size()
		}
	}
	return nil
}

// bindRoot is the directory of its file system a mount shows, when it is
// not the file system's root: what tells a bind mount of /srv/data from
// the device /srv lives on, when no container spec names the source.
func bindRoot(m *mnt.MntEntry) string {
	if r := m.GetRoot(); r != "/" {
		return r
	}
	return ""
}
