package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/inventory"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/seccomp"
	"google.golang.org/protobuf/proto"

	"github.com/cryo-gpu/cryo/internal/criuimg"
)

// image is what CRIU will restore that carries rights: every thread's
// credentials and seccomp chain, the root task's namespaces, the cgroup
// sets and the mounts. It is read from the images themselves, never from
// cryo's manifest: the manifest is the image's own claim.
type image struct {
	dir     string
	tasks   []task
	rootIDs *criucore.TaskKobjIdsEntry // CRIU's own namespaces at dump
	taskIDs *criucore.TaskKobjIdsEntry // the root task's
	procIDs []procIDs                  // every process's, the root's first
	cgroups *cgroup.CgroupEntry        // nil: the image has none
	mounts  []*mnt.MntEntry
	mountNS int // how many mount namespaces the mounts come from
	filters []*seccomp.SeccompFilter
}

// procIDs is one process's namespace ids: CRIU puts each process into
// the namespaces its own ids-<pid>.img names, not only the root's.
type procIDs struct {
	pid int
	ids *criucore.TaskKobjIdsEntry
}

// task is one thread as CRIU restores it.
type task struct {
	pid, tid int
	core     *criucore.CoreEntry
}

// label names a thread in messages: its process, and the thread when it is
// not the process's main thread.
func (t task) label() string {
	comm := t.core.GetTc().GetComm()
	if t.tid == t.pid {
		return fmt.Sprintf("process %d (%s)", t.pid, comm)
	}
	return fmt.Sprintf("thread %d of process %d (%s)", t.tid, t.pid, comm)
}

// readImage reads dir's CRIU images. An image CRIU needs that is missing
// or undecodable is an error: a check that cannot read the images cannot
// vouch for them.
func readImage(dir string) (*image, error) {
	im := &image{dir: dir}
	steps := []func() error{im.readInventory, im.readTasks, im.readCgroups, im.readMounts, im.readSeccomp}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return im, nil
}

func (im *image) readInventory() error {
	inv, err := one[*inventory.InventoryEntry](im.dir, "inventory.img", &inventory.InventoryEntry{})
	if err != nil {
		return err
	}
	im.rootIDs = inv.GetRootIds()
	if im.rootIDs == nil {
		return &imageError{file: "inventory.img", reason: "it records no namespaces of CRIU's own (root_ids)"}
	}
	return nil
}

func (im *image) readTasks() error {
	entries, err := criuimg.ReadImage(im.dir, "pstree.img", &pstree.PstreeEntry{})
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return &imageError{file: "pstree.img", reason: "it lists no process"}
	}
	for _, e := range entries {
		p := e.(*pstree.PstreeEntry)
		if err := im.readProcess(p); err != nil {
			return err
		}
		ids, err := one[*criucore.TaskKobjIdsEntry](im.dir, fmt.Sprintf("ids-%d.img", p.GetPid()), &criucore.TaskKobjIdsEntry{})
		if err != nil {
			return err
		}
		im.procIDs = append(im.procIDs, procIDs{pid: int(p.GetPid()), ids: ids})
	}
	im.taskIDs = im.procIDs[0].ids
	return nil
}

// readProcess reads the core image of each of p's threads: credentials and
// seccomp are per thread, and CRIU restores each thread's own.
func (im *image) readProcess(p *pstree.PstreeEntry) error {
	threads := p.GetThreads()
	if len(threads) == 0 {
		threads = []uint32{p.GetPid()}
	}
	for _, tid := range threads {
		core, err := one[*criucore.CoreEntry](im.dir, fmt.Sprintf("core-%d.img", tid), &criucore.CoreEntry{})
		if err != nil {
			return err
		}
		im.tasks = append(im.tasks, task{pid: int(p.GetPid()), tid: int(tid), core: core})
	}
	return nil
}

func (im *image) readCgroups() error {
	cg, err := one[*cgroup.CgroupEntry](im.dir, "cgroup.img", &cgroup.CgroupEntry{})
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errEmpty) {
		return nil // CRIU then moves nothing: the tasks stay where runc put them
	}
	im.cgroups = cg
	return err
}

// readMounts reads the mount images CRIU reads: mountpoints-<id>.img of
// each mount namespace a process names. Another file of that pattern (a
// dump left in a reused image directory by an earlier checkpoint) is not
// read by CRIU, so it claims nothing.
func (im *image) readMounts() error {
	var names []string
	seen := map[uint32]bool{}
	for _, p := range im.procIDs {
		id := p.ids.GetMntNsId()
		if seen[id] {
			continue
		}
		seen[id] = true
		path := filepath.Join(im.dir, fmt.Sprintf("mountpoints-%d.img", id))
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			continue // a namespace CRIU's own: checkNamespaces decides
		} else if err != nil {
			return err
		}
		names = append(names, path)
	}
	sort.Strings(names)
	im.mountNS = len(seen)
	if len(names) == 0 {
		im.mountNS = 0
	}
	for _, path := range names {
		entries, err := criuimg.ReadImage(im.dir, filepath.Base(path), &mnt.MntEntry{})
		if err != nil {
			return err
		}
		for _, e := range entries {
			im.mounts = append(im.mounts, e.(*mnt.MntEntry))
		}
	}
	return nil
}

// tmpfsDump is the dump of a tmpfs's contents that CRIU's tmpfs_restore
// reads: tmpfs-dev-<s_dev>.tar.gz.img, or, where that file does not exist
// (ENOENT alone: any other error fails CRIU's restore, and the check that
// reads it), tmpfs-<mnt_id>.tar.gz.img. false: neither exists, and CRIU
// fails the restore of that tmpfs.
func (im *image) tmpfsDump(m *mnt.MntEntry) (string, bool) {
	for _, name := range []string{fmt.Sprintf("tmpfs-dev-%d.tar.gz.img", m.GetRootDev()), fmt.Sprintf("tmpfs-%d.tar.gz.img", m.GetMntId())} {
		p := filepath.Join(im.dir, name)
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			return p, true
		}
	}
	return "", false
}

func (im *image) readSeccomp() error {
	sc, err := one[*seccomp.SeccompEntry](im.dir, "seccomp.img", &seccomp.SeccompEntry{})
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errEmpty) {
		return nil // no thread has a filter; a thread that claims one fails below
	}
	if err != nil {
		return err
	}
	im.filters = sc.GetSeccompFilters()
	return nil
}

// errEmpty marks an image with no entry.
var errEmpty = errors.New("the image holds no entry")

// one reads the single entry of an image.
func one[T proto.Message](dir, name string, msg proto.Message) (T, error) {
	var zero T
	entries, err := criuimg.ReadImage(dir, name, msg)
	if err != nil {
		return zero, err
	}
	if len(entries) == 0 {
		return zero, fmt.Errorf("CRIU image %s: %w", filepath.Join(dir, name), errEmpty)
	}
	return entries[0].(T), nil
}

// imageError is an image that cannot be checked.
type imageError struct {
	file, reason string
}

func (e *imageError) Error() string {
	return fmt.Sprintf("CRIU image %s cannot be checked: %s", e.file, e.reason)
}

func (e *imageError) Unwrap() error { return criuimg.ErrCorrupt }
