package integration

// A restored container can do nothing its new spec forbids. CRIU restores
// credentials, capabilities, no_new_privs, seccomp, namespaces, cgroups,
// mounts and /dev from the checkpoint's images, and runc does not re-apply
// the spec over them. These tests take real checkpoints with cryo-runc,
// real runc and CRIU, of containers with more rights than the spec they are
// restored into (or edit the images as an attacker would), and check that
// cryo-runc refuses each before runc restore runs; and that a restricted
// container restored into its own spec comes back with that spec's rights.

import (
	"fmt"
	"os"
	"os/exec"
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
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"

	"github.com/cryo-gpu/cryo/internal/criutest"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// cfContainer is a busybox shell loop run by cryo-runc with real runc.
type cfContainer struct {
	t                     *testing.T
	dir, bundle, root, id string
	out                   *testsupport.Buffer
}

const cfLoop = `i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.2; done`

func newCFContainer(t *testing.T, edit func(*specs.Spec)) *cfContainer {
	requireRoot(t)
	dir := t.TempDir()
	c := &cfContainer{t: t, dir: dir, bundle: rwBundle(t, filepath.Join(dir, "bundle")),
		root: filepath.Join(dir, "runc-root"), id: fmt.Sprintf("cryo-cf-%d-%d", os.Getpid(), time.Now().UnixNano()%100000)}
	c.edit(func(s *specs.Spec) {
		s.Process.Args = []string{"/bin/sh", "-c", cfLoop}
		s.Root.Readonly = false
	})
	if edit != nil {
		c.edit(edit)
	}
	t.Cleanup(func() { runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "delete", "-f", c.id) })
	return c
}

func (c *cfContainer) edit(f func(*specs.Spec)) {
	(&mgContainer{t: c.t, bundle: c.bundle}).edit(f)
}

func (c *cfContainer) env() []string {
	return append(fakeDriverEnv(c.t, ""), "CRYO_RUNC=/usr/sbin/runc")
}

func (c *cfContainer) start() {
	c.t.Helper()
	c.out = rwRunDetached(c.t, c.env(), cryoBin(c.t, "cryo-runc"), "--root", c.root, "run", "-d", "--bundle", c.bundle, c.id)
	c.waitTick(3)
}

func (c *cfContainer) lastTick() int {
	n := -1
	for _, m := range regexp.MustCompile(`tick (\d+)`).FindAllStringSubmatch(c.out.String(), -1) {
		n, _ = strconv.Atoi(m[1])
	}
	return n
}

func (c *cfContainer) waitTick(n int) {
	c.t.Helper()
	waitFor(c.t, 20*time.Second, "tick "+strconv.Itoa(n), func() bool { return c.lastTick() >= n })
}

func (c *cfContainer) checkpoint() string {
	c.t.Helper()
	img := filepath.Join(c.dir, "img")
	run(c.t, 2*time.Minute, c.env(), cryoBin(c.t, "cryo-runc"), "--root", c.root, "checkpoint", "--image-path", img, "--work-path", img+"-work", c.id)
	return img
}

func (c *cfContainer) restoreArgs(img string) []string {
	return []string{"--root", c.root, "restore", "-d", "--image-path", img, "--work-path", img + "-rwork", "--bundle", c.bundle, c.id}
}

// refused restores img and checks that cryo-runc refused it at the confine
// step with every one of want in its message, and that nothing runs.
func (c *cfContainer) refused(img string, want ...string) {
	c.t.Helper()
	out, err := runErr(time.Minute, c.env(), cryoBin(c.t, "cryo-runc"), c.restoreArgs(img)...)
	if err == nil {
		c.t.Fatalf("the restore was not refused:\n%s", out)
	}
	for _, w := range append([]string{"confine", "nothing was restored"}, want...) {
		if !strings.Contains(out, w) {
			c.t.Errorf("the refusal lacks %q:\n%s", w, out)
		}
	}
	if list, _ := runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "list", "-q"); strings.Contains(list, c.id) {
		c.t.Errorf("the refused container exists: %s", list)
	}
}

func (c *cfContainer) restored(img string) {
	c.t.Helper()
	before := c.lastTick()
	c.out = rwRunDetached(c.t, c.env(), cryoBin(c.t, "cryo-runc"), c.restoreArgs(img)...)
	c.waitTick(before + 3)
}

// status reads the restored init's /proc status fields.
func (c *cfContainer) status() map[string]string {
	c.t.Helper()
	out := run(c.t, 10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "state", c.id)
	m := regexp.MustCompile(`"pid": (\d+)`).FindStringSubmatch(out)
	if m == nil {
		c.t.Fatalf("no pid in runc state:\n%s", out)
	}
	data, err := os.ReadFile("/proc/" + m[1] + "/status")
	if err != nil {
		c.t.Fatal(err)
	}
	return procStatus(c.t, string(data))
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
	bnd := hostCapBnd()
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

// hostCapBnd is this process's bounding set.
func hostCapBnd() uint64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// restrictedUID is the uid of a restricted source: 1000, except where root
// lacks CAP_SYS_RESOURCE (some VMs), without which CRIU cannot read the
// rlimits of a process of another user and so cannot dump it at all.
func restrictedUID(t *testing.T) uint32 {
	if hostCapBnd()&(1<<24) == 0 {
		t.Log("root lacks CAP_SYS_RESOURCE here: CRIU cannot dump a process of another uid, so the restricted source runs as uid 0 (no capabilities, no_new_privs, seccomp)")
		return 0
	}
	return 1000
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
	c.start()
	img := c.checkpoint()
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
	if list, _ := runErr(10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "list"); strings.Contains(list, c.id) {
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
			c.edit(tc.edit)
			c.refused(img, tc.want...)
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
	c.start()
	img := c.checkpoint()
	c.edit(func(s *specs.Spec) {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	})
	c.refused(img, "network namespace", "the host's")
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
	uid := restrictedUID(t)
	c := newCFContainer(t, func(s *specs.Spec) {
		specRestricted(s)
		s.Process.User = specs.User{UID: uid, GID: uid}
	})
	c.start()
	img := c.checkpoint()
	t.Run("creds", func(t *testing.T) {
		c.t = t
		edited := copyDir(t, img)
		editImage(t, edited, "core-1.img", &criucore.CoreEntry{}, func(m proto.Message) {
			cr := m.(*criucore.CoreEntry).GetThreadCore().GetCreds()
			zero, full := uint32(0), []uint32{0xffffffff, 0x1ff}
			cr.Uid, cr.Euid, cr.Suid, cr.Fsuid = &zero, &zero, &zero, &zero
			cr.CapBnd, cr.CapPrm, cr.CapEff = full, full, full
		})
		if uid != 0 {
			c.refused(edited, "uid is 0")
		} else {
			c.refused(edited, "capabilities (bounding)", "CAP_SYS_ADMIN")
		}
	})
	t.Run("cgroup", func(t *testing.T) {
		c.t = t
		edited := copyDir(t, img)
		editImage(t, edited, "cgroup.img", &cgroup.CgroupEntry{}, func(m proto.Message) {
			for _, set := range m.(*cgroup.CgroupEntry).GetSets() {
				for _, ctl := range set.GetCtls() {
					p := ctl.GetPath() + "/../.."
					ctl.Path = &p
				}
			}
		})
		c.refused(edited, "cgroup path", "climbs out")
	})
	t.Run("cgroup outside", func(t *testing.T) {
		c.t = t
		edited := copyDir(t, img)
		editImage(t, edited, "cgroup.img", &cgroup.CgroupEntry{}, func(m proto.Message) {
			for _, set := range m.(*cgroup.CgroupEntry).GetSets() {
				for _, ctl := range set.GetCtls() {
					root := "/"
					ctl.Path = &root
				}
			}
		})
		c.refused(edited, "cgroup path", "outside the container's cgroup")
	})
	// The mask of /proc/acpi made a writable proc mount (core_pattern in
	// reach), and the /dev dump moved to the name CRIU falls back to with
	// the kernel log and physical memory in it.
	t.Run("mask made a proc", func(t *testing.T) {
		c.t = t
		edited := copyDir(t, img)
		proc := mountAt(t, edited, "/proc")
		editMountAt(t, edited, "/proc/acpi", func(m *mnt.MntEntry) {
			rw := m.GetFlags() &^ 1
			m.Fstype, m.RootDev, m.Source, m.Flags, m.SbFlags = proc.Fstype, proc.RootDev, proc.Source, &rw, proto.Uint32(0)
		})
		reseal(t, edited)
		c.refused(edited, "masked path /proc/acpi", "proc", "writable")
	})
	t.Run("dev dump under its mount id", func(t *testing.T) {
		c.t = t
		edited := copyDir(t, img)
		moveDevDump(t, edited)
		reseal(t, edited)
		c.refused(edited, "device /dev/", "c 1:")
	})
	t.Run("restores as its spec", func(t *testing.T) {
		c.t = t
		c.restored(img)
		st := c.status()
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

// copyDir copies a checkpoint directory (flat: CRIU images and cryo's
// manifest).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "edited")
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	return dst
}

// editImage rewrites the entries of one CRIU image through edit, and
// re-seals cryo's manifest over the changed files, as an attacker with
// go-criu and cryo's own format would.
func editImage(t *testing.T, dir, name string, msg proto.Message, edit func(proto.Message)) {
	t.Helper()
	criutest.EditImage(t, dir, name, msg, edit)
	reseal(t, dir)
}

// reseal recomputes the digests in cryo's manifest.
func reseal(t *testing.T, dir string) {
	t.Helper()
	m, err := manifest.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Digests, err = digest.Files(dir); err != nil {
		t.Fatal(err)
	}
	if err := manifest.Write(dir, m); err != nil {
		t.Fatal(err)
	}
}
