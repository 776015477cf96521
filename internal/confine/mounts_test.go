package confine

import (
	"archive/tar"
	"compress/gzip"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cryo-gpu/cryo/internal/criuimg"
	"github.com/cryo-gpu/cryo/internal/criutest"
	"google.golang.org/protobuf/proto"
)

// The mounts of testdata/runc, by mount point, as the test edits them:
// /proc is mount 66 on superblock 40, /dev 67 on 41, /dev/pts 68 on 42,
// /sys 71 on 44, the /proc/acpi mask 48 on 46.
const (
	procDev, devDev, ptsDev, sysDev = 40, 41, 42, 44
	devMntID, acpiMntID             = 67, 48
)

func u32(v uint32) *uint32 { return &v }
func str(v string) *string { return &v }

// editMount rewrites the entry at one mount point.
func editMount(t *testing.T, dir, at string, fn func(*mnt.MntEntry)) {
	t.Helper()
	found := false
	editMounts(t, dir, func(m *mnt.MntEntry) {
		if m.GetMountpoint() == at {
			found = true
			fn(m)
		}
	})
	if !found {
		t.Fatalf("the test image has no mount at %s", at)
	}
}

// Each shape an attacker can give the entry of a masked path, a read-only
// path or a spec mount, edited into the real checkpoint of testdata/runc.
func TestMountShapes(t *testing.T) {
	cases := []struct {
		name string
		edit func(t *testing.T, dir string)
		want []string
	}{
		{"mask made a writable proc", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/acpi", func(m *mnt.MntEntry) {
				m.Fstype, m.RootDev, m.Source, m.Flags, m.SbFlags = u32(uint32(mnt.Fstype_PROC)), u32(procDev), str("proc"), u32(0x200000), u32(0)
			})
		}, []string{"masked path /proc/acpi", `proc (source "proc", root "/", writable)`, "an empty read-only tmpfs"}},
		{"mask made a read-only proc", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/acpi", func(m *mnt.MntEntry) {
				m.Fstype, m.RootDev, m.Source = u32(uint32(mnt.Fstype_PROC)), u32(procDev), str("proc")
			})
		}, []string{"masked path /proc/acpi", "proc"}},
		{"mask made a sysfs", func(t *testing.T, dir string) {
			editMount(t, dir, "/sys/firmware", func(m *mnt.MntEntry) {
				m.Fstype, m.RootDev, m.Source = u32(uint32(mnt.Fstype_SYSFS)), u32(sysDev), str("sysfs")
			})
		}, []string{"masked path /sys/firmware", "sysfs"}},
		{"mask made a devtmpfs", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/acpi", func(m *mnt.MntEntry) { m.Fstype = u32(uint32(mnt.Fstype_DEVTMPFS)) })
		}, []string{"masked path /proc/acpi", "devtmpfs"}},
		{"mask made a binfmt_misc", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/acpi", func(m *mnt.MntEntry) { m.Fstype = u32(uint32(mnt.Fstype_BINFMT_MISC)) })
		}, []string{"masked path /proc/acpi", "binfmt_misc"}},
		{"mask on /dev's superblock", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/acpi", func(m *mnt.MntEntry) { m.RootDev = u32(devDev) })
		}, []string{"masked path /proc/acpi", "superblock of its own"}},
		{"mask with contents", func(t *testing.T, dir string) {
			addNode(t, filepath.Join(dir, "tmpfs-dev-46.tar.gz.img"), "kcore", 1, 3)
		}, []string{"masked path /proc/acpi", "holding nothing"}},
		{"mask with contents under its mount id", func(t *testing.T, dir string) {
			dump := filepath.Join(dir, "tmpfs-dev-46.tar.gz.img")
			addNode(t, dump, "kcore", 1, 3)
			if err := os.Rename(dump, filepath.Join(dir, "tmpfs-48.tar.gz.img")); err != nil {
				t.Fatal(err)
			}
		}, []string{"masked path /proc/acpi", "holding nothing"}},
		{"writable mask", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/acpi", func(m *mnt.MntEntry) { m.Flags, m.SbFlags = u32(0x200000), u32(0) })
		}, []string{"masked path /proc/acpi", "writable"}},
		{"file mask of another external mount", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/keys", func(m *mnt.MntEntry) { m.ExtKey = str("/etc/hosts") })
		}, []string{"masked path /proc/keys", `external mount "/etc/hosts"`, "the bind of /dev/null"}},
		{"file mask made a proc", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/keys", func(m *mnt.MntEntry) {
				m.ExtKey, m.Fstype, m.RootDev, m.Root = nil, u32(uint32(mnt.Fstype_PROC)), u32(procDev), str("/")
			})
		}, []string{"masked path /proc/keys", "proc"}},
		{"read-only path made a writable proc", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/sys", func(m *mnt.MntEntry) { m.Root, m.Flags = str("/"), u32(0x200000) })
		}, []string{"read-only path /proc/sys", `root "/"`, "writable", `root "/sys"`}},
		{"read-only path showing all of proc", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/sys", func(m *mnt.MntEntry) { m.Root = str("/") })
		}, []string{"read-only path /proc/sys", `a read-only bind of proc, root "/sys"`}},
		{"read-only path climbing out", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/sys", func(m *mnt.MntEntry) { m.Root = str("/sys/..") })
		}, []string{"read-only path /proc/sys"}},
		{"read-only path of sysfs", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/sys", func(m *mnt.MntEntry) {
				m.Fstype, m.RootDev, m.Source = u32(uint32(mnt.Fstype_SYSFS)), u32(sysDev), str("sysfs")
			})
		}, []string{"read-only path /proc/sys", "sysfs"}},
		{"read-only path as an external mount", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/sys", func(m *mnt.MntEntry) { m.ExtKey = str("/dev/null") })
		}, []string{"read-only path /proc/sys", `external mount "/dev/null"`}},
		{"second mount over a mask", func(t *testing.T, dir string) {
			criutest.AppendEntry(t, dir, "mountpoints-13.img", &mnt.MntEntry{
				Fstype: u32(uint32(mnt.Fstype_PROC)), MntId: u32(90), RootDev: u32(procDev), ParentMntId: u32(acpiMntID),
				Flags: u32(0x200000), Root: str("/"), Mountpoint: str("/proc/acpi"), Source: str("proc"), Options: str(""),
			})
		}, []string{"mount /proc/acpi", "one mount at /proc/acpi, not 2 mounts"}},
		{"mask peer of proc", func(t *testing.T, dir string) {
			editMounts(t, dir, func(m *mnt.MntEntry) {
				if m.GetMountpoint() == "/proc" || m.GetMountpoint() == "/proc/acpi" {
					m.SharedId = u32(7)
				}
			})
		}, []string{"shared with"}},
		{"mount point not in plain form", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/acpi", func(m *mnt.MntEntry) { m.Mountpoint = str("/proc//acpi") })
		}, []string{"mount /proc//acpi", "plain form"}},
		{"spec mount of another type", func(t *testing.T, dir string) {
			editMount(t, dir, "/dev/mqueue", func(m *mnt.MntEntry) { m.Fstype, m.RootDev = u32(uint32(mnt.Fstype_PROC)), u32(procDev) })
		}, []string{"mount /dev/mqueue", "a mqueue mount"}},
		{"spec mount on another superblock", func(t *testing.T, dir string) {
			editMount(t, dir, "/dev/shm", func(m *mnt.MntEntry) { m.RootDev = u32(devDev) })
		}, []string{"mount /dev/shm", "a superblock of its own"}},
		{"spec mount of part of a file system", func(t *testing.T, dir string) {
			editMount(t, dir, "/dev/shm", func(m *mnt.MntEntry) { m.Root = str("/x") })
		}, []string{"mount /dev/shm", `root "/x"`}},
		{"spec mount of another source", func(t *testing.T, dir string) {
			editMount(t, dir, "/dev/shm", func(m *mnt.MntEntry) { m.Source = str("tmpfs") })
		}, []string{"mount /dev/shm", `source "shm"`}},
		{"spec mount as an external mount", func(t *testing.T, dir string) {
			editMount(t, dir, "/dev/pts", func(m *mnt.MntEntry) { m.ExtKey = str("/dev/null") })
		}, []string{"mount /dev/pts", "a devpts mount"}},
		{"a devtmpfs for /dev", func(t *testing.T, dir string) {
			editMount(t, dir, "/dev", func(m *mnt.MntEntry) { m.Fstype = u32(uint32(mnt.Fstype_DEVTMPFS)) })
		}, []string{"mount /dev", "a tmpfs mount"}},
		{"controller of another type", func(t *testing.T, dir string) {
			editMount(t, dir, "/sys/fs/cgroup/cpu", func(m *mnt.MntEntry) { m.Fstype, m.RootDev, m.ExtKey = u32(uint32(mnt.Fstype_SYSFS)), u32(sysDev), nil })
		}, []string{"mount /sys/fs/cgroup/cpu", "cgroup v1 controller"}},
		{"controller of another external mount", func(t *testing.T, dir string) {
			editMount(t, dir, "/sys/fs/cgroup/cpu", func(m *mnt.MntEntry) { m.ExtKey = str("/dev/null") })
		}, []string{"mount /sys/fs/cgroup/cpu", "cgroup v1 controller"}},
		{"writable controller", func(t *testing.T, dir string) {
			editMount(t, dir, "/sys/fs/cgroup/cpu", func(m *mnt.MntEntry) { m.Flags = u32(0x20000e) })
		}, []string{"mount /sys/fs/cgroup/cpu", "without ro"}},
		{"mask on another parent", func(t *testing.T, dir string) {
			// Mounted before /proc, the mask would lie hidden under it.
			editMount(t, dir, "/proc/acpi", func(m *mnt.MntEntry) { m.ParentMntId = u32(71) })
		}, []string{"mount /proc/acpi", "on the mount at /sys", "a mount on the one at /proc"}},
		{"two mounts of one id", func(t *testing.T, dir string) {
			editMount(t, dir, "/proc/acpi", func(m *mnt.MntEntry) { m.MntId = u32(66) })
		}, []string{"mount /proc", "one mount of id 66, not another at /proc/acpi"}},
		{"console without a terminal", func(t *testing.T, dir string) { addConsole(t, dir, func(*mnt.MntEntry) {}) },
			[]string{"mount /dev/console", "no mount there"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyImages(t)
			tc.edit(t, dir)
			refused(t, Check(dir, runcSpec(t)), tc.want...)
		})
	}
}

// TestStaleMountImage: CRIU reads mountpoints-<id>.img of the namespaces
// the processes name, so a file of another id (an earlier dump's, left in
// an image directory that runc's --image-path reuses) claims nothing,
// whatever it holds.
func TestStaleMountImage(t *testing.T) {
	dir := copyImages(t)
	data, err := os.ReadFile(filepath.Join(dir, "mountpoints-13.img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mountpoints-14.img"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	criutest.EditImage(t, dir, "mountpoints-14.img", &mnt.MntEntry{}, func(m proto.Message) {
		e := m.(*mnt.MntEntry)
		if e.GetMountpoint() == "/proc/acpi" {
			e.Fstype = proto.Uint32(uint32(mnt.Fstype_PROC))
		}
	})
	if err := Check(dir, runcSpec(t)); err != nil {
		t.Fatalf("a mount image no process names was read: %v", err)
	}
}

// addConsole adds runc's /dev/console of a terminal container: a bind of
// pty 0 of the container's devpts.
func addConsole(t *testing.T, dir string, fn func(*mnt.MntEntry)) {
	t.Helper()
	m := &mnt.MntEntry{
		Fstype: u32(uint32(mnt.Fstype_DEVPTS)), MntId: u32(91), RootDev: u32(ptsDev), ParentMntId: u32(devMntID),
		Flags: u32(0x20000a), Root: str("/0"), Mountpoint: str("/dev/console"), Source: str("devpts"),
		Options: str("gid=5,mode=620,ptmxmode=666,newinstance"),
	}
	fn(m)
	criutest.AppendEntry(t, dir, "mountpoints-13.img", m)
}

func terminalSpec(t *testing.T) *specs.Spec {
	s := runcSpec(t)
	s.Process.Terminal = true
	return s
}

// A terminal container's /dev/console is runc's bind of its pty: exactly
// that passes.
func TestConsole(t *testing.T) {
	dir := copyImages(t)
	addConsole(t, dir, func(*mnt.MntEntry) {})
	if err := Check(dir, terminalSpec(t)); err != nil {
		t.Fatalf("runc's console of a terminal container: %v", err)
	}
	cases := map[string]func(*mnt.MntEntry){
		"a climbing root": func(m *mnt.MntEntry) { m.Root = str("/0/..") },
		"another devpts":  func(m *mnt.MntEntry) { m.RootDev = u32(99) },
		"a proc": func(m *mnt.MntEntry) {
			m.Fstype, m.RootDev, m.Root = u32(uint32(mnt.Fstype_PROC)), u32(procDev), str("/1")
		},
		"an external pty": func(m *mnt.MntEntry) { m.ExtKey = str("/dev/null") },
		"the host's /dev": func(m *mnt.MntEntry) {
			m.Fstype, m.RootDev, m.Root = u32(uint32(mnt.Fstype_DEVTMPFS)), u32(5), str("/console")
		},
		"a tmpfs pty name": func(m *mnt.MntEntry) { m.Fstype, m.RootDev = u32(uint32(mnt.Fstype_TMPFS)), u32(devDev) },
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			dir := copyImages(t)
			addConsole(t, dir, fn)
			refused(t, Check(dir, terminalSpec(t)), "mount /dev/console", "the container's own pty")
		})
	}
}

// CRIU reads a tmpfs's contents from tmpfs-dev-<s_dev>, and from
// tmpfs-<mnt_id> where that does not exist: the nodes are checked in the
// one it reads.
func TestDevicesUnderEitherName(t *testing.T) {
	dir := copyImages(t)
	dump := filepath.Join(dir, "tmpfs-dev-41.tar.gz.img")
	addNode(t, dump, "kmsg", 1, 11)
	addNode(t, dump, "mem", 1, 1)
	if err := os.Rename(dump, filepath.Join(dir, "tmpfs-67.tar.gz.img")); err != nil {
		t.Fatal(err)
	}
	refused(t, Check(dir, runcSpec(t)), "device /dev/kmsg", "c 1:11")

	// Both there: CRIU reads tmpfs-dev-41 and never the other.
	clean := copyImages(t)
	data, err := os.ReadFile(filepath.Join(dir, "tmpfs-67.tar.gz.img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(clean, "tmpfs-67.tar.gz.img"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(clean, runcSpec(t)); err != nil {
		t.Fatalf("a dump CRIU does not read: %v", err)
	}

	// tmpfs-dev-41 a dangling link: CRIU's open fails with ENOENT and it
	// reads tmpfs-67.
	if err := os.Remove(filepath.Join(clean, "tmpfs-dev-41.tar.gz.img")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(clean, "tmpfs-dev-41.tar.gz.img")); err != nil {
		t.Fatal(err)
	}
	refused(t, Check(clean, runcSpec(t)), "device /dev/", "c 1:")
}

// A mask whose dump is a file rather than the root alone is no mask, and
// an empty dump is.
func TestTmpfsEmpty(t *testing.T) {
	for name, entries := range map[string][]*tar.Header{
		"root alone": {{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}},
		"a file":     {{Name: "./", Typeflag: tar.TypeDir}, {Name: "./kcore", Typeflag: tar.TypeReg}},
		"one file":   {{Name: "./kcore", Typeflag: tar.TypeReg}},
	} {
		p := filepath.Join(t.TempDir(), "dump")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		zw := gzip.NewWriter(f)
		tw := tar.NewWriter(zw)
		for _, h := range entries {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
		}
		tw.Close()
		zw.Close()
		f.Close()
		empty, err := tmpfsEmpty(p)
		if want := name == "root alone"; empty != want || err != nil {
			t.Errorf("%s: empty = %v, %v; want %v", name, empty, err, want)
		}
	}
}

// A spec bind is the external mount runc names by its destination: an
// entry that names another one, or none, is refused. testdata/tsync is a
// CRI container with binds of /etc/hosts, /etc/hostname, /etc/resolv.conf
// and /dev/shm.
func TestBindShapes(t *testing.T) {
	cases := map[string]struct {
		at   string
		fn   func(*mnt.MntEntry)
		want string
	}{
		"another bind's key": {"/etc/hosts", func(m *mnt.MntEntry) { m.ExtKey = str("/etc/hostname") }, `external mount "/etc/hostname"`},
		"a fresh tmpfs":      {"/dev/shm", func(m *mnt.MntEntry) { m.ExtKey = nil }, "the bind of"},
		"the /dev/null bind": {"/etc/resolv.conf", func(m *mnt.MntEntry) { m.ExtKey = str("/dev/null") }, "the bind of"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			entries, _ := os.ReadDir("testdata/tsync")
			for _, e := range entries {
				data, _ := os.ReadFile(filepath.Join("testdata/tsync", e.Name()))
				os.WriteFile(filepath.Join(dir, e.Name()), data, 0o600)
			}
			editMount(t, dir, tc.at, tc.fn)
			refused(t, Check(dir, tsyncSpec(t)), "mount "+tc.at, tc.want)
		})
	}
}

// keepMounts rewrites the mountpoints image with the entries keep keeps.
func keepMounts(t *testing.T, dir string, keep func(*mnt.MntEntry) bool) {
	t.Helper()
	entries, err := criuimg.ReadImage(dir, "mountpoints-13.img", &mnt.MntEntry{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "mountpoints-13.img")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw[:8], 0o600); err != nil { // the magic numbers alone
		t.Fatal(err)
	}
	for _, e := range entries {
		if m := e.(*mnt.MntEntry); keep(m) {
			criutest.AppendEntry(t, dir, "mountpoints-13.img", m)
		}
	}
}

// On cgroup v2 runc mounts cgroup2 at the spec's cgroup mount, and CRIU
// records its root as the container's cgroup seen from CRIU's cgroup
// namespace: that root is the cgroup check's, and passes here.
func TestCgroup2Mount(t *testing.T) {
	dir := copyImages(t)
	keepMounts(t, dir, func(m *mnt.MntEntry) bool { return path.Dir(m.GetMountpoint()) != "/sys/fs/cgroup" })
	editMount(t, dir, "/sys/fs/cgroup", func(m *mnt.MntEntry) {
		m.Fstype, m.Root, m.Source, m.Flags = u32(uint32(mnt.Fstype_CGROUP2)), str("/kubepods/pod1/c1"), str("cgroup"), u32(0x20000f)
	})
	if err := Check(dir, runcSpec(t)); err != nil {
		t.Fatalf("runc's cgroup2 mount: %v", err)
	}
	editMount(t, dir, "/sys/fs/cgroup", func(m *mnt.MntEntry) { m.Flags = u32(0x20000e) })
	refused(t, Check(dir, runcSpec(t)), "mount /sys/fs/cgroup", "without ro")
}

// An external mount that runc names CRIU no source for is CRIU's to
// refuse (its refusal is worded with the remedy); one at a place the spec
// names nothing whose key runc does map is refused here.
func TestUnmappedExternalMount(t *testing.T) {
	dir := t.TempDir()
	entries, _ := os.ReadDir("testdata/tsync")
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join("testdata/tsync", e.Name()))
		os.WriteFile(filepath.Join(dir, e.Name()), data, 0o600)
	}
	editMount(t, dir, "/etc/hostname", func(m *mnt.MntEntry) { m.Mountpoint, m.ExtKey = str("/data"), str("/data") })
	spec := tsyncSpec(t)
	var kept []specs.Mount
	for _, m := range spec.Mounts {
		if m.Destination != "/etc/hostname" {
			kept = append(kept, m)
		}
	}
	spec.Mounts = kept
	if err := Check(dir, spec); err != nil {
		t.Fatalf("an external mount runc does not map: %v", err)
	}
	editMount(t, dir, "/data", func(m *mnt.MntEntry) { m.ExtKey = str("/etc/hosts") })
	refused(t, Check(dir, spec), "mount /data", `external mount "/etc/hosts"`, "no mount there")
}
