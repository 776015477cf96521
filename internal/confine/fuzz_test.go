package confine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// The fields FuzzCheck mutates, one bit each in its which argument.
const (
	fzCgDir  = 1 << iota // every top directory of controller ctl (or all)
	fzCgPath             // every set member of controller ctl (or all)
	fzCgns               // the members' cgroup-namespace prefix
	fzUID                // every uid of every thread
	fzMount              // one mount's point, filesystem and flags
	fzTmpfs              // a tmpfs dump's file name: tmpfs-dev-<s_dev> → tmpfs-<mnt_id>
	fzNetns              // the root task's network namespace id
	fzOOM                // the processes' oom_score_adj
	fzNofile             // the processes' RLIMIT_NOFILE
)

// FuzzCheck mutates the security fields of the real checkpoint in
// testdata/runc, as an attacker with go-criu would, and runs Check against
// the checkpoint's own spec and a non-root variant of it. Check must never
// panic, and what it accepts must hold these, each written here apart from
// the check's own code:
//   - every cgroup member is rewritten into the container's cgroup by
//     CRIU's raw prefix test (strstartswith(path + 1, dir_name)), to the
//     cgroup itself or a child, nothing climbing;
//   - no thread has uid 0 when the spec runs as a non-root user;
//   - the OOM score is CRIU's "leave it" (0) or not below the spec's;
//   - RLIMIT_NOFILE's hard limit is not above the spec's 1024;
//   - the root task is not in the host's (CRIU's) network namespace.
//
// Mounts and tmpfs dumps are mutated for Check's robustness alone.
func FuzzCheck(f *testing.F) {
	f.Add(uint16(0), uint8(255), "cf1", "/cf1", uint32(0), uint32(0), uint8(0), "/proc/acpi", uint32(0), uint32(0), uint32(0), int32(0), uint64(1024))
	f.Add(uint16(fzCgDir|fzCgPath), uint8(255), "/", "/", uint32(0), uint32(0), uint8(0), "", uint32(0), uint32(0), uint32(0), int32(0), uint64(0))
	f.Add(uint16(fzCgDir), uint8(255), "/cf1", "", uint32(0), uint32(0), uint8(0), "", uint32(0), uint32(0), uint32(0), int32(0), uint64(0))
	f.Add(uint16(fzCgPath|fzCgns), uint8(0), "", "/cf1x", uint32(4), uint32(0), uint8(0), "", uint32(0), uint32(0), uint32(0), int32(0), uint64(0))
	f.Add(uint16(fzUID|fzOOM|fzNofile), uint8(0), "", "", uint32(0), uint32(1000), uint8(0), "", uint32(0), uint32(0), uint32(0), int32(-1000), uint64(1<<20))
	f.Add(uint16(fzMount|fzTmpfs|fzNetns), uint8(0), "", "", uint32(0), uint32(0), uint8(3), "/proc/acpi", uint32(1), uint32(0), uint32(2), int32(0), uint64(0))
	seed := readSeed(f)
	f.Fuzz(func(t *testing.T, which uint16, ctl uint8, cgDir, cgPath string, cgns, uid uint32, mntIdx uint8, mntPoint string, mntFs, mntFlags, netns uint32, oom int32, nofile uint64) {
		dir := t.TempDir()
		for name, data := range seed {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		m := mutation{which: which, ctl: ctl, cgDir: cgDir, cgPath: cgPath, cgns: cgns, uid: uid, mntIdx: mntIdx,
			mntPoint: mntPoint, mntFs: mntFs, mntFlags: mntFlags, netns: netns, oom: oom, nofile: nofile}
		m.apply(t, dir)
		spec := runcSpec(t)
		if err := Check(dir, spec); err == nil {
			accepted(t, dir, false)
		}
		spec.Process.User.UID, spec.Process.User.GID = 1000, 1000
		if err := Check(dir, spec); err == nil {
			accepted(t, dir, true)
		}
	})
}

// readSeed reads the checkpoint's files once.
func readSeed(f *testing.F) map[string][]byte {
	entries, err := os.ReadDir(runcDir)
	if err != nil {
		f.Fatal(err)
	}
	seed := map[string][]byte{}
	for _, e := range entries {
		if seed[e.Name()], err = os.ReadFile(filepath.Join(runcDir, e.Name())); err != nil {
			f.Fatal(err)
		}
	}
	return seed
}

type mutation struct {
	which           uint16
	ctl, mntIdx     uint8
	cgDir, cgPath   string
	mntPoint        string
	cgns, uid       uint32
	mntFs, mntFlags uint32
	netns           uint32
	oom             int32
	nofile          uint64
}

func (m mutation) on(bit uint16) bool { return m.which&bit != 0 }

func (m mutation) apply(t *testing.T, dir string) {
	if m.on(fzCgDir | fzCgPath | fzCgns) {
		edit(t, dir, "cgroup.img", &cgroup.CgroupEntry{}, func(msg proto.Message) { m.cgroups(msg.(*cgroup.CgroupEntry)) })
	}
	if m.on(fzUID | fzOOM | fzNofile) {
		for _, name := range []string{"core-1.img", "core-7.img"} {
			edit(t, dir, name, &criucore.CoreEntry{}, func(msg proto.Message) { m.core(msg.(*criucore.CoreEntry)) })
		}
	}
	if m.on(fzMount) {
		i := 0
		edit(t, dir, "mountpoints-13.img", &mnt.MntEntry{}, func(msg proto.Message) {
			if i++; i-1 == int(m.mntIdx) {
				e := msg.(*mnt.MntEntry)
				e.Mountpoint, e.Fstype, e.Flags = proto.String(m.mntPoint), proto.Uint32(m.mntFs), proto.Uint32(m.mntFlags)
			}
		})
	}
	if m.on(fzTmpfs) {
		m.renameTmpfs(t, dir)
	}
	if m.on(fzNetns) {
		edit(t, dir, "ids-1.img", &criucore.TaskKobjIdsEntry{}, func(msg proto.Message) {
			msg.(*criucore.TaskKobjIdsEntry).NetNsId = proto.Uint32(m.netns)
		})
	}
}

func (m mutation) cgroups(cg *cgroup.CgroupEntry) {
	names := map[string]bool{}
	for i, c := range cg.GetControllers() {
		if m.ctl != 255 && int(m.ctl)%len(cg.GetControllers()) != i {
			continue
		}
		names[strings.Join(c.GetCnames(), ",")] = true
		for _, d := range c.GetDirs() {
			if m.on(fzCgDir) {
				d.DirName = proto.String(m.cgDir)
			}
		}
	}
	for _, set := range cg.GetSets() {
		for _, ctl := range set.GetCtls() {
			if !names[ctl.GetName()] {
				continue
			}
			if m.on(fzCgPath) {
				ctl.Path = proto.String(m.cgPath)
			}
			if m.on(fzCgns) {
				ctl.CgnsPrefix = proto.Uint32(m.cgns)
			}
		}
	}
}

func (m mutation) core(c *criucore.CoreEntry) {
	if cr := c.GetThreadCore().GetCreds(); cr != nil && m.on(fzUID) {
		cr.Uid, cr.Euid, cr.Suid, cr.Fsuid = proto.Uint32(m.uid), proto.Uint32(m.uid), proto.Uint32(m.uid), proto.Uint32(m.uid)
	}
	tc := c.GetTc()
	if tc == nil {
		return
	}
	if m.on(fzOOM) {
		tc.OomScoreAdj = proto.Int32(m.oom)
	}
	if r := tc.GetRlimits().GetRlimits(); m.on(fzNofile) && len(r) > unix.RLIMIT_NOFILE {
		r[unix.RLIMIT_NOFILE].Max = proto.Uint64(m.nofile)
	}
}

// renameTmpfs gives one tmpfs dump the other name CRIU reads it by.
func (m mutation) renameTmpfs(t *testing.T, dir string) {
	dumps, _ := filepath.Glob(filepath.Join(dir, "tmpfs-dev-*.tar.gz.img"))
	if len(dumps) == 0 {
		return
	}
	from := dumps[int(m.mntIdx)%len(dumps)]
	if err := os.Rename(from, filepath.Join(dir, fmt.Sprintf("tmpfs-%d.tar.gz.img", m.mntFs))); err != nil {
		t.Fatal(err)
	}
}

// accepted asserts the invariants of an image Check accepted.
func accepted(t *testing.T, dir string, nonRoot bool) {
	t.Helper()
	im, err := readImage(dir)
	if err != nil {
		t.Fatalf("Check accepted an image it cannot read: %v", err)
	}
	if im.cgroups != nil {
		assertCgroupsInside(t, im.cgroups)
	}
	for _, task := range im.tasks {
		cr := task.core.GetThreadCore().GetCreds()
		if nonRoot && cr != nil && (cr.GetUid() == 0 || cr.GetEuid() == 0 || cr.GetSuid() == 0 || cr.GetFsuid() == 0) {
			t.Errorf("accepted: %s has uid 0 under a non-root spec", task.label())
		}
		tc := task.core.GetTc()
		if v := tc.GetOomScoreAdj(); v < 0 {
			t.Errorf("accepted: %s has oom_score_adj %d below the spec's 0", task.label(), v)
		}
		if r := tc.GetRlimits().GetRlimits(); len(r) > unix.RLIMIT_NOFILE && r[unix.RLIMIT_NOFILE].GetMax() > 1024 {
			t.Errorf("accepted: %s has RLIMIT_NOFILE's hard limit %d above the spec's 1024", task.label(), r[unix.RLIMIT_NOFILE].GetMax())
		}
	}
	if im.taskIDs.GetNetNsId() == im.rootIDs.GetNetNsId() {
		t.Errorf("accepted: the root task is in CRIU's own network namespace (%d)", im.taskIDs.GetNetNsId())
	}
}

// assertCgroupsInside checks each member against CRIU's raw prefix test:
// some top directory of the controller of the same name prefixes the path
// after its first byte, and what CRIU appends to the new root is empty or
// a child path that does not climb. The test data's members name their
// controller exactly, so the match is by name.
func assertCgroupsInside(t *testing.T, cg *cgroup.CgroupEntry) {
	t.Helper()
	dirs := map[string][]string{}
	for _, c := range cg.GetControllers() {
		for _, d := range c.GetDirs() {
			n := strings.Join(c.GetCnames(), ",")
			dirs[n] = append(dirs[n], cstr(d.GetDirName()))
		}
	}
	for _, set := range cg.GetSets() {
		for _, m := range set.GetCtls() {
			path, matches, ok := cstr(m.GetPath()), 0, true
			for _, d := range dirs[m.GetName()] {
				if path == "" || !strings.HasPrefix(path[1:], d) {
					continue
				}
				matches++
				rest := path[len(d)+1:]
				if p := int(m.GetCgnsPrefix()); p != 0 {
					rest = path[min(p, len(path)):]
				}
				ok = ok && (rest == "" || (strings.HasPrefix(rest, "/") && !climbs(rest)))
			}
			if matches == 0 || !ok {
				t.Errorf("accepted: cgroup member %q %q (cgns prefix %d) lands outside the container's cgroup for CRIU (directories %q)",
					m.GetName(), m.GetPath(), m.GetCgnsPrefix(), dirs[m.GetName()])
			}
		}
	}
}
