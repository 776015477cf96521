package confine

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"

	"github.com/cryo-gpu/cryo/internal/criutest"
)

// testdata/runc holds the metadata images of a real checkpoint: a busybox
// shell loop in a container made by `runc spec` (runc 1.1.5, CRIU 4.2.1),
// pages left out, and that spec as spec.json.
const runcDir = "testdata/runc"

func runcSpec(t *testing.T) *specs.Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runcDir, "spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// copyImages copies the test checkpoint into a directory a test may edit.
func copyImages(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(runcDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(runcDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// edit rewrites every entry of one image through fn, as an attacker with
// go-criu would.
func edit(t *testing.T, dir, name string, msg proto.Message, fn func(proto.Message)) {
	t.Helper()
	criutest.EditImage(t, dir, name, msg, fn)
}

// refused checks that err is a Violation whose message holds every want.
func refused(t *testing.T, err error, want ...string) {
	t.Helper()
	var v *Violation
	if !errors.As(err, &v) || !errors.Is(err, ErrExceedsSpec) {
		t.Fatalf("error = %v, want a violation", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
}

func TestSameSpecPasses(t *testing.T) {
	if err := Check(runcDir, runcSpec(t)); err != nil {
		t.Fatal(err)
	}
}

func TestCredentials(t *testing.T) {
	cases := []struct {
		name string
		edit func(*specs.Spec)
		want []string
	}{
		{"uid", func(s *specs.Spec) { s.Process.User.UID = 1000 }, []string{"process 1 (sh)", "uid is 0", "uid 1000, without CAP_SETUID"}},
		{"gid", func(s *specs.Spec) { s.Process.User.GID = 1000 }, []string{"gid is 0"}},
		{"bounding", func(s *specs.Spec) { s.Process.Capabilities.Bounding = []string{"CAP_KILL"} }, []string{"capabilities (bounding)", "CAP_NET_BIND_SERVICE"}},
		{"permitted", func(s *specs.Spec) { s.Process.Capabilities.Permitted = nil }, []string{"capabilities (permitted)"}},
		{"none", func(s *specs.Spec) { s.Process.Capabilities = nil }, []string{"capabilities (bounding)", "grants none"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := runcSpec(t)
			tc.edit(s)
			refused(t, Check(runcDir, s), tc.want...)
		})
	}
	t.Run("fewer rights pass", func(t *testing.T) {
		s := runcSpec(t)
		s.Process.Capabilities.Bounding = append(s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN")
		s.Process.NoNewPrivileges = false
		if err := Check(runcDir, s); err != nil {
			t.Fatal(err)
		}
	})
}

// The image records no_new_privs (CRIU 4.2): the process ran with it set,
// so clearing it in the image is refused by a spec that sets it.
func TestNoNewPrivs(t *testing.T) {
	dir := copyImages(t)
	edit(t, dir, "core-1.img", &criucore.CoreEntry{}, func(m proto.Message) {
		c := m.(*criucore.CoreEntry).GetThreadCore().GetCreds()
		if _, nnp := credsExtra(c); nnp == nil || *nnp != 1 {
			t.Fatalf("the test image records no_new_privs as %v, want 1", nnp)
		}
		c.ProtoReflect().SetUnknown(nil) // an image of a process without it, as far as CRIU can tell
	})
	refused(t, Check(dir, runcSpec(t)), "no_new_privs", "not set")
}

func TestEditedCredentials(t *testing.T) {
	dir := copyImages(t)
	edit(t, dir, "core-1.img", &criucore.CoreEntry{}, func(m proto.Message) {
		c := m.(*criucore.CoreEntry).GetThreadCore().GetCreds()
		c.CapBnd = []uint32{0xffffffff, 0x1ff}
	})
	refused(t, Check(dir, runcSpec(t)), "capabilities (bounding)", "CAP_SYS_ADMIN")
}

func TestHostNamespace(t *testing.T) {
	dir := copyImages(t)
	edit(t, dir, "ids-1.img", &criucore.TaskKobjIdsEntry{}, func(m proto.Message) {
		host := uint32(2) // inventory.img's root_ids: CRIU's own network namespace
		m.(*criucore.TaskKobjIdsEntry).NetNsId = &host
	})
	refused(t, Check(dir, runcSpec(t)), "network namespace", "the host's")
	s := runcSpec(t)
	s.Linux.Namespaces = nil // a hostNetwork-like spec asks for nothing: fine
	s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = nil, nil
	if err := Check(dir, s); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupEscape(t *testing.T) {
	for name, path := range map[string]string{"climb": "/cf1/../..", "outside": "/", "sibling": "/cf10"} {
		t.Run(name, func(t *testing.T) {
			dir := copyImages(t)
			edit(t, dir, "cgroup.img", &cgroup.CgroupEntry{}, func(m proto.Message) {
				for _, set := range m.(*cgroup.CgroupEntry).GetSets() {
					for _, ctl := range set.GetCtls() {
						if ctl.GetName() == "devices" {
							p := path
							ctl.Path = &p
						}
					}
				}
			})
			refused(t, Check(dir, runcSpec(t)), "cgroup path (devices")
		})
	}
	t.Run("subgroup passes", func(t *testing.T) {
		dir := copyImages(t)
		edit(t, dir, "cgroup.img", &cgroup.CgroupEntry{}, func(m proto.Message) {
			for _, set := range m.(*cgroup.CgroupEntry).GetSets() {
				for _, ctl := range set.GetCtls() {
					p := ctl.GetPath() + "/worker"
					ctl.Path = &p
				}
			}
		})
		if err := Check(dir, runcSpec(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMounts(t *testing.T) {
	t.Run("writable sysfs", func(t *testing.T) {
		dir := copyImages(t)
		editMounts(t, dir, func(m *mnt.MntEntry) {
			if m.GetMountpoint() == "/sys" {
				f, sb := m.GetFlags()&^1, m.GetSbFlags()&^1
				m.Flags, m.SbFlags = &f, &sb
			}
		})
		refused(t, Check(dir, runcSpec(t)), "mount /sys", "without ro")
	})
	t.Run("unmasked", func(t *testing.T) {
		dir := copyImages(t)
		editMounts(t, dir, func(m *mnt.MntEntry) {
			if m.GetMountpoint() == "/proc/keys" {
				p := "/proc/keys-gone"
				m.Mountpoint = &p
			}
		})
		refused(t, Check(dir, runcSpec(t)), "masked path /proc/keys", "not masked")
	})
	t.Run("writable proc/sys", func(t *testing.T) {
		dir := copyImages(t)
		editMounts(t, dir, func(m *mnt.MntEntry) {
			if m.GetMountpoint() == "/proc/sys" {
				f := m.GetFlags() &^ 1
				m.Flags = &f
			}
		})
		refused(t, Check(dir, runcSpec(t)), "read-only path /proc/sys", "writable")
	})
	t.Run("extra file system", func(t *testing.T) {
		dir := copyImages(t)
		editMounts(t, dir, func(m *mnt.MntEntry) {
			if m.GetMountpoint() == "/sys/firmware" {
				p, typ := "/mnt", uint32(mnt.Fstype_DEBUGFS)
				m.Mountpoint, m.Fstype = &p, &typ
			}
		})
		refused(t, Check(dir, runcSpec(t)), "mount /mnt", "no mount there")
	})
}

func editMounts(t *testing.T, dir string, fn func(*mnt.MntEntry)) {
	t.Helper()
	edit(t, dir, "mountpoints-13.img", &mnt.MntEntry{}, func(m proto.Message) { fn(m.(*mnt.MntEntry)) })
}

func TestDevices(t *testing.T) {
	dir := copyImages(t)
	addNode(t, filepath.Join(dir, "tmpfs-dev-41.tar.gz.img"), "kmsg", 1, 11)
	refused(t, Check(dir, runcSpec(t)), "device /dev/kmsg", "c 1:11")
	s := runcSpec(t)
	s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: "/dev/kmsg", Type: "c", Major: 1, Minor: 11})
	if err := Check(dir, s); err != nil {
		t.Fatal(err)
	}
}

func TestGPUNodeNeedsAGPU(t *testing.T) {
	dir := copyImages(t)
	addNode(t, filepath.Join(dir, "tmpfs-dev-41.tar.gz.img"), "nvidia0", 195, 0)
	refused(t, Check(dir, runcSpec(t)), "device /dev/nvidia0", "no GPU")
	s := runcSpec(t)
	s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: "/dev/nvidia1", Type: "c", Major: 195, Minor: 1})
	if err := Check(dir, s); err != nil {
		t.Fatalf("a GPU node passes when the spec grants a GPU (cryo replaces it): %v", err)
	}
}

// addNode appends a character device to a tmpfs dump.
func addNode(t *testing.T, path, name string, major, minor int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out, err := os.CreateTemp(t.TempDir(), "dump")
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(out)
	tw := tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		tw.WriteHeader(h)
	}
	f.Close()
	tw.WriteHeader(&tar.Header{Name: "./" + name, Typeflag: tar.TypeChar, Devmajor: major, Devminor: minor, Mode: 0o666})
	tw.Close()
	zw.Close()
	out.Close()
	if err := os.Rename(out.Name(), path); err != nil {
		t.Fatal(err)
	}
}

// A damaged image is an error, never a pass.
func TestUnreadableImage(t *testing.T) {
	dir := copyImages(t)
	if err := os.WriteFile(filepath.Join(dir, "core-1.img"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Check(dir, runcSpec(t))
	if err == nil || errors.Is(err, ErrExceedsSpec) {
		t.Fatalf("error = %v, want an image error", err)
	}
}

// testdata/tsync is a kubelet checkpoint (containerd 2.x CRI, runc, CRIU
// 4.2.1) of a two-thread process under RuntimeDefault seccomp, no
// capabilities and no_new_privs, with its spec: CRIU records the shared
// filter on the main thread alone, flagged TSYNC.
func TestTSYNCFilterCoversTheThreads(t *testing.T) {
	spec := func() *specs.Spec { return tsyncSpec(t) }
	if err := Check("testdata/tsync", spec()); err != nil {
		t.Fatalf("the checkpoint of its own spec: %v", err)
	}
	dir := t.TempDir()
	entries, _ := os.ReadDir("testdata/tsync")
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join("testdata/tsync", e.Name()))
		os.WriteFile(filepath.Join(dir, e.Name()), data, 0o600)
	}
	edit(t, dir, "seccomp.img", &seccomp.SeccompEntry{}, func(m proto.Message) {
		for _, f := range m.(*seccomp.SeccompEntry).GetSeccompFilters() {
			none := uint32(0)
			f.Flags = &none // no TSYNC: the other thread keeps no filter
		}
	})
	refused(t, Check(dir, spec()), "thread 6 of process 1", "seccomp", "no filter")
}

func tsyncSpec(t *testing.T) *specs.Spec {
	t.Helper()
	data, err := os.ReadFile("testdata/tsync/spec.json")
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}
