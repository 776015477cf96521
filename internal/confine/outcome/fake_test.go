package outcome

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cryo-gpu/cryo/internal/confine"
)

// fakeTask is one process of a fake /proc, with its threads.
type fakeTask struct {
	pid     int
	tids    []int
	status  string // the status file of each thread
	cgroup  string
	ns      map[string]uint64
	oom     string
	limits  string
	mounts  string // mountinfo; the root task's
	devices []devNode
}

const runcStatus = `Name:	sh
Uid:	1000	1000	1000	1000
Gid:	1000	1000	1000	1000
Groups:	1000
NoNewPrivs:	1
Seccomp:	2
Seccomp_filters:	1
CapInh:	0000000000000000
CapPrm:	0000000000000000
CapEff:	0000000000000000
CapBnd:	0000000000000020
CapAmb:	0000000000000000
`

const runcLimits = `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            1024                 1024                 files
Max processes             1024                 1024                 processes
`

var hostNS = map[string][]uint64{"pid": {1}, "net": {2}, "mnt": {3}, "ipc": {4}, "uts": {5}, "user": {6}, "cgroup": {7}}

func containerNS() map[string]uint64 {
	return map[string]uint64{"pid": 11, "net": 12, "mnt": 13, "ipc": 14, "uts": 15, "user": 6, "cgroup": 7}
}

// runcSpec is the spec of `runc spec`, restricted: uid 1000, CAP_KILL in
// the bounding set alone, no_new_privs and a seccomp profile.
func runcSpec() *specs.Spec {
	adj := 0
	return &specs.Spec{
		Process: &specs.Process{User: specs.User{UID: 1000, GID: 1000}, NoNewPrivileges: true, OOMScoreAdj: &adj,
			Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_KILL"}},
			Rlimits:      []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}}},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc"},
			{Destination: "/dev", Type: "tmpfs", Options: []string{"nosuid"}},
			{Destination: "/dev/pts", Type: "devpts", Options: []string{"nosuid", "noexec"}},
			{Destination: "/dev/shm", Type: "tmpfs", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
			{Destination: "/out", Type: "bind", Source: "/tmp/out", Options: []string{"rbind", "rw"}},
		},
		Linux: &specs.Linux{
			Namespaces:    []specs.LinuxNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}},
			Seccomp:       &specs.LinuxSeccomp{DefaultAction: specs.ActErrno},
			MaskedPaths:   []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

func runcTask(pid int, tids ...int) fakeTask {
	mi, _ := os.ReadFile("testdata/mountinfo-runc")
	return fakeTask{pid: pid, tids: append([]int{pid}, tids...), status: runcStatus,
		cgroup: "4:memory:/exp2\n8:pids:/exp2\n0::/exp2\n", ns: containerNS(), oom: "0", limits: runcLimits, mounts: string(mi),
		devices: []devNode{{'c', 1, 3}, {'c', 1, 5}}}
}

var runcWant = Want{Cgroups: map[string]string{"4:memory": "/exp2", "8:pids": "/exp2", "0:": "/exp2"}, HostNS: hostNS, OOMScoreAdj: 0,
	Limits: map[string]uint64{"RLIMIT_CPU": unlimited, "RLIMIT_NOFILE": 4096, "RLIMIT_NPROC": 4096}}

// writeFake writes a /proc of tasks (the first the root, the others its
// children) and the root's file system, and returns the /proc.
func writeFake(t *testing.T, tasks []fakeTask) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: the fake root file system holds device nodes")
	}
	proc := t.TempDir()
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"dev/pts", "proc/acpi", "proc/sys", "sys/firmware", "out"} {
		must(t, os.MkdirAll(filepath.Join(rootfs, d), 0o755))
	}
	for _, p := range []string{"proc/kcore", "proc/keys", "dev/null"} {
		must(t, unix.Mknod(filepath.Join(rootfs, p), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	}
	for i, task := range tasks {
		dir := filepath.Join(proc, fmt.Sprint(task.pid))
		for _, tid := range task.tids {
			tdir := filepath.Join(dir, "task", fmt.Sprint(tid))
			must(t, os.MkdirAll(filepath.Join(tdir, "ns"), 0o755))
			children := ""
			if i == 0 && tid == task.pid {
				for _, c := range tasks[1:] {
					children += fmt.Sprint(c.pid) + " "
				}
			}
			write(t, filepath.Join(tdir, "children"), children)
			write(t, filepath.Join(tdir, "status"), task.status)
			write(t, filepath.Join(tdir, "cgroup"), task.cgroup)
			for name, ino := range task.ns {
				must(t, os.Symlink(fmt.Sprintf("%s:[%d]", name, ino), filepath.Join(tdir, "ns", name)))
			}
		}
		write(t, filepath.Join(dir, "oom_score_adj"), task.oom+"\n")
		write(t, filepath.Join(dir, "limits"), task.limits)
		write(t, filepath.Join(dir, "mountinfo"), task.mounts)
		must(t, os.Symlink(rootfs, filepath.Join(dir, "root")))
		must(t, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
		for j, d := range task.devices {
			node := filepath.Join(t.TempDir(), "node")
			mode := uint32(unix.S_IFCHR)
			if d.kind == 'b' {
				mode = unix.S_IFBLK
			}
			must(t, unix.Mknod(node, mode|0o600, int(unix.Mkdev(d.major, d.minor))))
			must(t, os.Symlink(node, filepath.Join(dir, "fd", fmt.Sprint(j))))
		}
	}
	return proc
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, data string) { must(t, os.WriteFile(path, []byte(data), 0o644)) }

func TestFakeTrees(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(ts []fakeTask, s *specs.Spec, w *Want)
		field string // the violation's field; "" for none
	}{
		{"runc's own restore", func([]fakeTask, *specs.Spec, *Want) {}, ""},
		{"uid 0", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[1].status = strings.Replace(ts[1].status, "Uid:	1000	1000	1000	1000", "Uid:	1000	0	1000	1000", 1)
		}, "euid"},
		{"a thread's capability", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].tids = append(ts[0].tids, 77)
			ts[0].status = strings.Replace(ts[0].status, "CapBnd:	0000000000000020", "CapBnd:	0000000000200020", 1)
		}, "capabilities (bounding)"},
		{"effective outside permitted", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].status = strings.Replace(ts[0].status, "CapEff:	0000000000000000", "CapEff:	0000000000000020", 1)
		}, "capabilities (effective)"},
		{"no_new_privs", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].status = strings.Replace(ts[0].status, "NoNewPrivs:	1", "NoNewPrivs:	0", 1)
		}, "no_new_privs"},
		{"no seccomp filter", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[1].status = strings.Replace(ts[1].status, "Seccomp:	2\nSeccomp_filters:	1", "Seccomp:	0\nSeccomp_filters:	0", 1)
		}, "seccomp"},
		{"groups", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].status = strings.Replace(ts[0].status, "Groups:	1000", "Groups:	1000 0", 1)
		}, "supplementary groups"},
		{"host cgroup", func(ts []fakeTask, _ *specs.Spec, _ *Want) { ts[1].cgroup = "4:memory:/\n8:pids:/exp2\n0::/exp2\n" }, "cgroup 4:memory"},
		{"sibling cgroup with the prefix", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].cgroup = "4:memory:/exp2x\n8:pids:/exp2\n0::/exp2\n"
		}, "cgroup 4:memory"},
		{"cgroup below", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[1].cgroup = "4:memory:/exp2/sub\n8:pids:/exp2\n0::/exp2/sub\n"
		}, ""},
		{"host network", func(ts []fakeTask, _ *specs.Spec, _ *Want) { ts[1].ns["net"] = 2 }, "net namespace"},
		{"another pid namespace", func(ts []fakeTask, _ *specs.Spec, _ *Want) { ts[1].ns["pid"] = 99 }, "pid namespace"},
		{"joined by path", func(ts []fakeTask, s *specs.Spec, _ *Want) {
			var st unix.Stat_t
			must(t, unix.Stat("/proc/self/ns/net", &st))
			s.Linux.Namespaces[1].Path = "/proc/self/ns/net"
			ts[0].ns["net"], ts[1].ns["net"] = st.Ino, st.Ino
		}, ""},
		{"not the joined one", func(ts []fakeTask, s *specs.Spec, _ *Want) { s.Linux.Namespaces[1].Path = "/proc/self/ns/net" }, "net namespace"},
		{"oom_score_adj", func(ts []fakeTask, _ *specs.Spec, _ *Want) { ts[1].oom = "-1000" }, "oom_score_adj"},
		{"runtime's oom_score_adj", func(ts []fakeTask, s *specs.Spec, w *Want) { s.Process.OOMScoreAdj, w.OOMScoreAdj = nil, 100 }, "oom_score_adj"},
		{"raised nofile", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].limits = strings.Replace(ts[0].limits, "1024                 1024                 files", "1024                 1048576              files", 1)
		}, "hard limit RLIMIT_NOFILE"},
		{"raised nproc", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[1].limits = strings.Replace(ts[1].limits, "1024                 1024                 processes", "1024                 unlimited            processes", 1)
		}, "hard limit RLIMIT_NPROC"},
		{"open kmsg", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[1].devices = append(ts[1].devices, devNode{'c', 1, 11})
		}, "open file 2 (a device node)"},
		{"open disk", func(ts []fakeTask, _ *specs.Spec, _ *Want) { ts[0].devices = []devNode{{'b', 253, 0}} }, "open file 0 (a device node)"},
		{"spec device", func(ts []fakeTask, s *specs.Spec, _ *Want) {
			ts[0].devices = []devNode{{'c', 195, 0}, {'c', 136, 3}}
			s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/nvidia0", Type: "c", Major: 195, Minor: 0}}
		}, ""},
		{"masked path as proc", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts = strings.Replace(ts[0].mounts, "92 130 0:48 / /proc/acpi ro,relatime - tmpfs tmpfs ro", "92 130 0:42 / /proc/acpi rw,relatime - proc proc rw", 1)
		}, "mount /proc/acpi"},
		{"masked path unmasked", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts = strings.Replace(ts[0].mounts, "95 135 0:49 / /sys/firmware ro,relatime - tmpfs tmpfs ro\n", "", 1)
		}, "masked path /sys/firmware"},
		{"masked path rw tmpfs", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts = strings.Replace(ts[0].mounts, "/proc/acpi ro,relatime - tmpfs tmpfs ro", "/proc/acpi rw,relatime - tmpfs tmpfs rw", 1)
		}, "masked path /proc/acpi"},
		{"read-only path writable", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts = strings.Replace(ts[0].mounts, "91 130 0:42 /sys /proc/sys ro,relatime - proc proc rw\n", "", 1)
		}, "read-only path /proc/sys"},
		{"sysfs writable", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts = strings.Replace(ts[0].mounts, "/sys ro,nosuid,nodev,noexec,relatime - sysfs", "/sys rw,nosuid,nodev,noexec,relatime - sysfs", 1)
		}, "mount /sys"},
		{"cgroup hierarchy writable", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts = strings.Replace(ts[0].mounts, "/sys/fs/cgroup/pids ro,", "/sys/fs/cgroup/pids rw,", 1)
		}, "mount /sys/fs/cgroup"},
		{"a spec bind the checkpoint lacks", func(ts []fakeTask, s *specs.Spec, _ *Want) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/etc/hosts", Type: "bind", Source: "/etc/hosts", Options: []string{"rbind", "rw"}})
		}, ""},
		{"a read-only spec bind the checkpoint lacks", func(ts []fakeTask, s *specs.Spec, _ *Want) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/etc/hosts", Type: "bind", Source: "/etc/hosts", Options: []string{"rbind", "ro"}})
		}, ""},
		{"debugfs", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts += "160 135 0:7 / /sys/kernel/debug rw,relatime - debugfs debugfs rw\n"
		}, "mount /sys/kernel/debug"},
		{"host proc elsewhere", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts += "161 129 0:42 / /host-proc rw,relatime - proc proc rw\n"
		}, "mount /host-proc"},
		{"a devtmpfs /dev/null mask", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts = strings.Replace(ts[0].mounts, "93 130 0:43 /null /proc/kcore rw,nosuid - tmpfs tmpfs", "93 130 0:5 /null /proc/kcore rw,nosuid - devtmpfs udev", 1)
		}, ""},
		{"the host's /dev", func(ts []fakeTask, _ *specs.Spec, _ *Want) {
			ts[0].mounts = strings.Replace(ts[0].mounts, "131 129 0:43 / /dev rw,nosuid - tmpfs tmpfs", "131 129 0:5 / /dev rw,nosuid - devtmpfs udev", 1)
		}, "mount /dev"},
		{"not stopped by CRIU", func(ts []fakeTask, _ *specs.Spec, w *Want) { w.Tracer = 4242 }, "error"},
		{"dev node", func(ts []fakeTask, _ *specs.Spec, _ *Want) {}, "device node /dev/kmsg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := []fakeTask{runcTask(100, 101), runcTask(102)}
			spec, w := runcSpec(), runcWant
			w.Limits = map[string]uint64{"RLIMIT_CPU": unlimited, "RLIMIT_NPROC": 4096}
			// Every thread has the real filter of a runc container, and
			// the spec its seccomp (seccomp_test.go).
			chain, sc := realChain(t)
			spec.Linux.Seccomp, w.Filters = sc, Filters{}
			tc.edit(ts, spec, &w)
			for _, task := range ts {
				for _, tid := range task.tids {
					w.Filters[tid] = chain
				}
			}
			w.Spec = spec
			proc := writeFake(t, ts)
			if tc.name == "dev node" {
				root, _ := os.Readlink(filepath.Join(proc, "100", "root"))
				must(t, unix.Mknod(filepath.Join(root, "dev/kmsg"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 11))))
			}
			pids, err := Tree(proc, 100)
			if err != nil || len(pids) != 2 {
				t.Fatalf("tree: %v %v", pids, err)
			}
			err = Check(proc, pids, w)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var v *Violation
			if tc.field == "error" {
				if err == nil || errors.As(err, &v) {
					t.Fatalf("got %v, want an error that is no violation", err)
				}
				return
			}
			if !errors.As(err, &v) || !errors.Is(err, confine.ErrExceedsSpec) {
				t.Fatalf("got %v, want a violation of %s", err, tc.field)
			}
			if v.Field != tc.field {
				t.Fatalf("violation of %q (%v), want %q", v.Field, err, tc.field)
			}
		})
	}
}
