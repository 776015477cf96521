package outcome

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// startChild starts `sleep` in new UTS, IPC and network namespaces with
// /dev/null and, if open, extra open.
func startChild(t *testing.T, extra *os.File) int {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: the child gets namespaces of its own")
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET}
	if extra != nil {
		cmd.ExtraFiles = []*os.File{extra}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// selfSpec grants what this test process has: its ids, its capabilities,
// and namespaces of their own for uts, ipc and net.
func selfSpec(t *testing.T) (*specs.Spec, Want) {
	t.Helper()
	var all []string
	for _, n := range capNames {
		all = append(all, "CAP_"+n)
	}
	spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: all, Permitted: all, Effective: all, Inheritable: all, Ambient: all}},
		Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.UTSNamespace}, {Type: specs.IPCNamespace}, {Type: specs.NetworkNamespace}}}}
	cg, err := ReadCgroups("/proc/self/cgroup")
	must(t, err)
	lim, err := ReadLimits("/proc/self/limits")
	must(t, err)
	oom, err := ReadOOMScoreAdj("/proc/self/oom_score_adj")
	must(t, err)
	return spec, Want{Spec: spec, Cgroups: cg, HostNS: HostNamespaces("/proc/1", "/proc/self"), Limits: lim, OOMScoreAdj: oom}
}

// checkProcess runs every check but the root task's mount table and /dev
// (the child shares the host's) on pid.
func checkProcess(pid int, w Want) error {
	return newChecker("/proc", w).task(pid, false)
}

func TestRealProcess(t *testing.T) {
	kmsg, err := os.Open("/dev/kmsg")
	if err != nil {
		kmsg = nil
	} else {
		defer kmsg.Close()
	}
	pid := startChild(t, kmsg)
	cases := []struct {
		name  string
		edit  func(s *specs.Spec, w *Want)
		field string
	}{
		{"as granted", func(s *specs.Spec, w *Want) {
			if kmsg != nil {
				s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/kmsg", Type: "c", Major: 1, Minor: 11}}
			}
		}, ""},
		{"uid", func(s *specs.Spec, w *Want) { s.Process.User.UID = 1000; s.Process.Capabilities.Permitted = nil }, "uid"},
		{"capabilities", func(s *specs.Spec, w *Want) { s.Process.Capabilities.Bounding = []string{"CAP_KILL"} }, "capabilities (bounding)"},
		{"host pid namespace", func(s *specs.Spec, w *Want) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.PIDNamespace})
		}, "pid namespace"},
		{"joined network", func(s *specs.Spec, w *Want) {
			s.Linux.Namespaces[2].Path = "/proc/self/ns/net"
		}, "net namespace"},
		{"cgroup", func(s *specs.Spec, w *Want) { w.Cgroups["0:"] += "/deeper" }, "cgroup 0:"},
		{"oom", func(s *specs.Spec, w *Want) { adj := 999; s.Process.OOMScoreAdj = &adj }, "oom_score_adj"},
		{"nofile", func(s *specs.Spec, w *Want) {
			s.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 16, Soft: 16}}
		}, "hard limit RLIMIT_NOFILE"},
		{"kmsg", func(s *specs.Spec, w *Want) {
			if kmsg == nil {
				t.Skip("no /dev/kmsg here")
			}
		}, "open file 3 (a device node)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := selfSpec(t)
			tc.edit(spec, &w)
			err := checkProcess(pid, w)
			var v *Violation
			switch {
			case tc.field == "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case !errors.As(err, &v) || v.Field != tc.field:
				t.Fatalf("got %v, want a violation of %s", err, tc.field)
			}
		})
	}
	if got, err := Tree("/proc", os.Getpid()); err != nil || len(got) < 2 {
		t.Errorf("this test's tree: %v %v; want it and its child %s", got, err, strconv.Itoa(pid))
	}
}
