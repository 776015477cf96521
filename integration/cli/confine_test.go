package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/crit/images/cgroup"
	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/mnt"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
)

// cfContainer is a busybox shell loop run by cryo-runc with real runc.
type cfContainer struct {
	t                     *testing.T
	dir, bundle, root, id string
	out                   *testsupport.Buffer
}

const cfLoop = `i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.2; done`

func newCFContainer(t *testing.T, edit func(*specs.Spec)) *cfContainer {
	harness.RequireRoot(t)
	dir := t.TempDir()
	c := &cfContainer{t: t, dir: dir, bundle: harness.RwBundle(t, filepath.Join(dir, "bundle")),
		root: filepath.Join(dir, "runc-root"), id: fmt.Sprintf("cryo-cf-%d-%d", os.Getpid(), time.Now().UnixNano()%100000)}
	c.Edit(func(s *specs.Spec) {
		s.Process.Args = []string{"/bin/sh", "-c", cfLoop}
		s.Root.Readonly = false
	})
	if edit != nil {
		c.Edit(edit)
	}
	t.Cleanup(func() { harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "delete", "-f", c.id) })
	return c
}

func (c *cfContainer) Edit(f func(*specs.Spec)) {
	(&harness.MgContainer{T: c.t, Bundle: c.bundle}).Edit(f)
}

func (c *cfContainer) Env() []string {
	return append(harness.FakeDriverEnv(c.t, ""), "CRYO_RUNC=/usr/sbin/runc")
}

func (c *cfContainer) Start() {
	c.t.Helper()
	c.out = harness.RwRunDetached(c.t, c.Env(), harness.CryoBin(c.t, "cryo-runc"), "--root", c.root, "run", "-d", "--bundle", c.bundle, c.id)
	c.WaitTick(3)
}

func (c *cfContainer) LastTick() int {
	n := -1
	for _, m := range regexp.MustCompile(`tick (\d+)`).FindAllStringSubmatch(c.out.String(), -1) {
		n, _ = strconv.Atoi(m[1])
	}
	return n
}

func (c *cfContainer) WaitTick(n int) {
	c.t.Helper()
	harness.WaitFor(c.t, 20*time.Second, "tick "+strconv.Itoa(n), func() bool { return c.LastTick() >= n })
}

func (c *cfContainer) Checkpoint() string {
	c.t.Helper()
	img := filepath.Join(c.dir, "img")
	harness.Run(c.t, 2*time.Minute, c.Env(), harness.CryoBin(c.t, "cryo-runc"), "--root", c.root, "checkpoint", "--image-path", img, "--work-path", img+"-work", c.id)
	return img
}

func (c *cfContainer) restoreArgs(img string) []string {
	return []string{"--root", c.root, "restore", "-d", "--image-path", img, "--work-path", img + "-rwork", "--bundle", c.bundle, c.id}
}

// refused restores img and checks that cryo-runc refused it at the confine
// step with every one of want in its message, and that nothing runs.
func (c *cfContainer) Refused(img string, want ...string) {
	c.t.Helper()
	out, err := harness.RunErr(time.Minute, c.Env(), harness.CryoBin(c.t, "cryo-runc"), c.restoreArgs(img)...)
	if err == nil {
		c.t.Fatalf("the restore was not refused:\n%s", out)
	}
	for _, w := range append([]string{"confine", "nothing was restored"}, want...) {
		if !strings.Contains(out, w) {
			c.t.Errorf("the refusal lacks %q:\n%s", w, out)
		}
	}
	if list, _ := harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "list", "-q"); strings.Contains(list, c.id) {
		c.t.Errorf("the refused container exists: %s", list)
	}
}

func (c *cfContainer) restored(img string) {
	c.t.Helper()
	before := c.LastTick()
	c.out = harness.RwRunDetached(c.t, c.Env(), harness.CryoBin(c.t, "cryo-runc"), c.restoreArgs(img)...)
	c.WaitTick(before + 3)
}

// status reads the restored init's /proc status fields.
func (c *cfContainer) Status() map[string]string {
	c.t.Helper()
	out := harness.Run(c.t, 10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "state", c.id)
	m := regexp.MustCompile(`"pid": (\d+)`).FindStringSubmatch(out)
	if m == nil {
		c.t.Fatalf("no pid in runc state:\n%s", out)
	}
	data, err := os.ReadFile("/proc/" + m[1] + "/status")
	if err != nil {
		c.t.Fatal(err)
	}
	return harness.ProcStatus(c.t, string(data))
}

// specPrivileged is a source with every right: all capabilities, no
// no_new_privs, no seccomp filter, no masked or read-only paths, /sys
// writable and the kernel log device.
func specPrivileged(s *specs.Spec) {
	all := allCaps()
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: all, Effective: all, Permitted: all}
	s.Process.NoNewPrivileges = false
	s.Linux.Seccomp = nil
	s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = nil, nil
	for i, m := range s.Mounts {
		if m.Destination == "/sys" {
			s.Mounts[i].Options = []string{"nosuid", "noexec", "nodev"}
		}
	}
	s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: "/dev/kmsg", Type: "c", Major: 1, Minor: 11})
}

// allCaps is every capability this host's root holds: runc cannot grant
// one outside its own bounding set.
func allCaps() []string {
	var caps []string
	bnd := harness.HostCapBnd()
	for i, n := range strings.Fields(`CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
		NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT
		SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
		MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE`) {
		if bnd&(1<<i) != 0 {
			caps = append(caps, "CAP_"+n)
		}
	}
	return caps
}

// specRestricted is what Kubernetes' restricted profile gives a container:
// uid 1000, no capabilities, no_new_privs, the runtime's default seccomp
// profile, and the default masked and read-only paths of `runc spec`.
func specRestricted(s *specs.Spec) {
	s.Process.User = specs.User{UID: 1000, GID: 1000}
	s.Process.Capabilities = &specs.LinuxCapabilities{}
	s.Process.NoNewPrivileges = true
	s.Linux.Seccomp = seccomp.DefaultProfile(s)
}

func TestConfineRefusesPrivilegedSource(t *testing.T) {
	c := newCFContainer(t, specPrivileged)
	c.Start()
	img := c.Checkpoint()
	cases := []struct {
		name string
		edit func(*specs.Spec)
		want []string
	}{
		{"uid", func(s *specs.Spec) {
			s.Process.User = specs.User{UID: 1000, GID: 1000}
			s.Process.Capabilities = &specs.LinuxCapabilities{}
		}, []string{"uid is 0", "uid 1000, without CAP_SETUID"}},
		{"capabilities", func(s *specs.Spec) {
			s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: []string{"CAP_KILL"}, Permitted: []string{"CAP_KILL"}, Effective: []string{"CAP_KILL"}}
		}, []string{"capabilities (bounding)", "CAP_SYS_ADMIN"}},
		{"no_new_privs", func(s *specs.Spec) { s.Process.NoNewPrivileges = true }, []string{"no_new_privs is not set"}},
		{"seccomp", func(s *specs.Spec) { s.Linux.Seccomp = seccomp.DefaultProfile(s) }, []string{"seccomp", "no filter"}},
		{"sysfs", func(s *specs.Spec) {
			for i, m := range s.Mounts {
				if m.Destination == "/sys" {
					s.Mounts[i].Options = append(s.Mounts[i].Options, "ro")
				}
			}
		}, []string{"mount /sys", "without ro"}},
		{"masked", func(s *specs.Spec) { s.Linux.MaskedPaths = []string{"/proc/acpi", "/sys/firmware"} }, []string{"masked path /proc/acpi", "not masked"}},
		{"device", func(s *specs.Spec) { s.Linux.Devices = nil }, []string{"device /dev/kmsg", "c 1:11"}},
		{"restricted", specRestricted, []string{"uid is 0"}},
	}
	if list, _ := harness.RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "list"); strings.Contains(list, c.id) {
		t.Fatalf("the checkpointed container is still there:\n%s", list)
	}
	source, err := os.ReadFile(filepath.Join(c.bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	reset := func() {
		if err := os.WriteFile(filepath.Join(c.bundle, "config.json"), source, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			reset()
			c.Edit(tc.edit)
			c.Refused(img, tc.want...)
		})
	}
	t.Run("same spec", func(t *testing.T) {
		c.t = t
		reset()
		c.restored(img)
	})
}

// A checkpoint of a container in the host's network namespace must not
// come back there when its new spec gives it one of its own (a hostNetwork
// pod's checkpoint restored into an ordinary pod).
func TestConfineRefusesHostNetwork(t *testing.T) {
	c := newCFContainer(t, func(s *specs.Spec) { s.Linux.Namespaces = withoutNS(s.Linux.Namespaces, specs.NetworkNamespace) })
	c.Start()
	img := c.Checkpoint()
	c.Edit(func(s *specs.Spec) {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	})
	c.Refused(img, "network namespace", "the host's")
}

func withoutNS(in []specs.LinuxNamespace, typ specs.LinuxNamespaceType) []specs.LinuxNamespace {
	var out []specs.LinuxNamespace
	for _, ns := range in {
		if ns.Type != typ {
			out = append(out, ns)
		}
	}
	return out
}

// An attacker needs no privileged source: editing the credentials in an
// unprivileged checkpoint's core images (and re-sealing cryo's manifest
// with the tools anyone has) must be refused as well.
func TestConfineRefusesEditedImages(t *testing.T) {
	uid := harness.RestrictedUID(t)
	c := newCFContainer(t, func(s *specs.Spec) {
		specRestricted(s)
		s.Process.User = specs.User{UID: uid, GID: uid}
	})
	c.Start()
	img := c.Checkpoint()
	t.Run("creds", func(t *testing.T) {
		c.t = t
		edited := harness.CopyDir(t, img)
		harness.EditImage(t, edited, "core-1.img", &criucore.CoreEntry{}, func(m proto.Message) {
			cr := m.(*criucore.CoreEntry).GetThreadCore().GetCreds()
			zero, full := uint32(0), []uint32{0xffffffff, 0x1ff}
			cr.Uid, cr.Euid, cr.Suid, cr.Fsuid = &zero, &zero, &zero, &zero
			cr.CapBnd, cr.CapPrm, cr.CapEff = full, full, full
		})
		if uid != 0 {
			c.Refused(edited, "uid is 0")
		} else {
			c.Refused(edited, "capabilities (bounding)", "CAP_SYS_ADMIN")
		}
	})
	t.Run("cgroup", func(t *testing.T) {
		c.t = t
		edited := harness.CopyDir(t, img)
		harness.EditImage(t, edited, "cgroup.img", &cgroup.CgroupEntry{}, func(m proto.Message) {
			for _, set := range m.(*cgroup.CgroupEntry).GetSets() {
				for _, ctl := range set.GetCtls() {
					p := ctl.GetPath() + "/../.."
					ctl.Path = &p
				}
			}
		})
		c.Refused(edited, "cgroup path", "climbs out")
	})
	t.Run("cgroup outside", func(t *testing.T) {
		c.t = t
		edited := harness.CopyDir(t, img)
		harness.EditImage(t, edited, "cgroup.img", &cgroup.CgroupEntry{}, func(m proto.Message) {
			for _, set := range m.(*cgroup.CgroupEntry).GetSets() {
				for _, ctl := range set.GetCtls() {
					root := "/"
					ctl.Path = &root
				}
			}
		})
		c.Refused(edited, "cgroup path", "outside the container's cgroup")
	})
	// The mask of /proc/acpi made a writable proc mount (core_pattern in
	// reach), and the /dev dump moved to the name CRIU falls back to with
	// the kernel log and physical memory in it.
	t.Run("mask made a proc", func(t *testing.T) {
		c.t = t
		edited := harness.CopyDir(t, img)
		proc := harness.MountAt(t, edited, "/proc")
		harness.EditMountAt(t, edited, "/proc/acpi", func(m *mnt.MntEntry) {
			rw := m.GetFlags() &^ 1
			m.Fstype, m.RootDev, m.Source, m.Flags, m.SbFlags = proc.Fstype, proc.RootDev, proc.Source, &rw, proto.Uint32(0)
		})
		harness.Reseal(t, edited)
		c.Refused(edited, "masked path /proc/acpi", "proc", "writable")
	})
	t.Run("dev dump under its mount id", func(t *testing.T) {
		c.t = t
		edited := harness.CopyDir(t, img)
		harness.MoveDevDump(t, edited)
		harness.Reseal(t, edited)
		c.Refused(edited, "device /dev/", "c 1:")
	})
	t.Run("restores as its spec", func(t *testing.T) {
		c.t = t
		c.restored(img)
		st := c.Status()
		ids := fmt.Sprintf("%[1]d %[1]d %[1]d %[1]d", uid)
		want := map[string]string{"Uid": ids, "Gid": ids, "CapEff": "0000000000000000",
			"CapBnd": "0000000000000000", "CapPrm": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
		for k, v := range want {
			if st[k] != v {
				t.Errorf("restored process: %s = %q, want %q", k, st[k], v)
			}
		}
	})
}
