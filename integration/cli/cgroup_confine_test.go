package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
)

// cgContainer is a cfContainer in a cgroup of its own (cgroupsPath), with
// the spec's memory and pids limits.
func cgContainer(t *testing.T) (*cfContainer, string) {
	var cg string
	c := newCFContainer(t, func(s *specs.Spec) {
		s.Linux.Resources = &specs.LinuxResources{
			Memory: &specs.LinuxMemory{Limit: proto.Int64(256 << 20)},
			Pids:   &specs.LinuxPids{Limit: proto.Int64(64)},
		}
	})
	cg = "/" + c.id
	c.Edit(func(s *specs.Spec) { s.Linux.CgroupsPath = cg })
	t.Cleanup(func() { removeCgroups(cg) })
	return c, cg
}

// removeCgroups removes cg on every hierarchy (empty once runc deleted the
// container).
func removeCgroups(cg string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cg))
	for _, d := range append(dirs, filepath.Join("/sys/fs/cgroup/unified", cg)) {
		_ = os.Remove(d)
	}
}

// initPID is the restored container's init, from runc.
func (c *cfContainer) initPID() string {
	c.t.Helper()
	out := harness.Run(c.t, 10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "state", c.id)
	m := regexp.MustCompile(`"pid": (\d+)`).FindStringSubmatch(out)
	if m == nil {
		c.t.Fatalf("no pid in runc state:\n%s", out)
	}
	return m[1]
}

// assertInCgroup: every line of /proc/PID/cgroup, each v1 controller and
// the unified hierarchy, names exactly cg.
func assertInCgroup(t *testing.T, pid, cg string) {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("/proc/%s/cgroup of the restored task:\n%s", pid, data)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 2 {
		t.Fatalf("too few hierarchies: %q", data)
	}
	mounted := harness.MountedHierarchies(t)
	for _, l := range lines {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && !mounted(parts[1]) {
			// A hierarchy nothing mounts (CRIU's own test suite leaves
			// name=zdtmtst ones behind) has no place runc could put the
			// container, so every task sits at its root.
			continue
		}
		if len(parts) != 3 || parts[2] != cg {
			t.Errorf("the restored task is in %q, not in the container's cgroup %s", l, cg)
		}
	}
}

// assertLimits: the spec's memory and pids limits are those of the
// cgroup the task is in, and its device rules are runc's for the spec
// (not the host root cgroup's "a *:* rwm").
func assertLimits(t *testing.T, cg string) {
	t.Helper()
	if data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/devices", cg, "devices.list")); err != nil || strings.Contains(string(data), "a *:* rwm") {
		t.Errorf("devices.list of %s: %q (%v), want the spec's rules", cg, data, err)
	}
	for file, want := range map[string]string{"memory/" + cg + "/memory.limit_in_bytes": fmt.Sprint(256 << 20), "pids/" + cg + "/pids.max": "64"} {
		data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", file))
		if err != nil || strings.TrimSpace(string(data)) != want {
			t.Errorf("%s = %q (%v), want the spec's %s", file, data, err, want)
		}
	}
}

func TestConfineCgroupCrafted(t *testing.T) {
	c, cg := cgContainer(t)
	c.Start()
	img := c.Checkpoint()
	// The image: every directory "/" and every member "/".
	// CRIU's strstartswith("", "/") fails: unrewritten, the tasks would
	// go into the host's root cgroups.
	t.Run("root slash", func(t *testing.T) {
		c.t = t
		c.Refused(harness.Crafted(t, img, func(string) string { return "/" }, func(string) string { return "/" }), "cgroup path", "no cgroup directory of the image prefixes", "of the host")
	})
	// A leading "/" on the directories only: a path cryo used to trim
	// and compare equal, which CRIU's raw test never matches.
	t.Run("leading slash", func(t *testing.T) {
		c.t = t
		c.Refused(harness.Crafted(t, img, func(d string) string { return "/" + d }, harness.Same), "cgroup path", "no cgroup directory of the image prefixes")
	})
	// By construction: runc restores the crafted image with the CRIU
	// configuration cryo writes for every restore, the check left out.
	// The tasks stay in the container's cgroups on every hierarchy.
	t.Run("construction without the check", func(t *testing.T) {
		c.t = t
		edited := harness.Crafted(t, img, func(string) string { return "/" }, func(string) string { return "/" })
		undo, lines, err := criu.ConfineCgroups(c.bundle)
		if err != nil || len(lines) == 0 {
			t.Fatalf("lines %q: %v", lines, err)
		}
		out, err := harness.RunErr(time.Minute, nil, "/usr/sbin/runc", "--root", c.root, "restore", "-d", "--image-path", edited,
			"--work-path", edited+"-rwork", "--bundle", c.bundle, c.id)
		if uerr := undo(); uerr != nil {
			t.Error(uerr)
		}
		if err != nil {
			t.Fatalf("runc restore: %v\n%s", err, out)
		}
		assertInCgroup(t, c.initPID(), cg)
		assertLimits(t, cg)
		harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "delete", "-f", c.id)
	})
	// Why the mode: the same image restored by runc in CRIU's default
	// mode, the check left out, puts the task in the host's root cgroups.
	t.Run("default mode escapes", func(t *testing.T) {
		c.t = t
		edited := harness.Crafted(t, img, func(string) string { return "/" }, func(string) string { return "/" })
		out, err := harness.RunErr(time.Minute, nil, "/usr/sbin/runc", "--root", c.root, "restore", "-d", "--image-path", edited,
			"--work-path", edited+"-rwork", "--bundle", c.bundle, c.id)
		if err != nil {
			t.Fatalf("runc restore: %v\n%s", err, out)
		}
		pid := c.initPID()
		data, _ := os.ReadFile("/proc/" + pid + "/cgroup")
		harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "delete", "-f", c.id)
		t.Logf("default mode, /proc/%s/cgroup:\n%s", pid, data)
		if !strings.Contains(string(data), "memory:/\n") {
			t.Errorf("CRIU's default mode kept the crafted image's task out of the host's root memory cgroup:\n%s", data)
		}
	})
	t.Run("restored in its own cgroup", func(t *testing.T) {
		c.t = t
		c.restored(img)
		assertInCgroup(t, c.initPID(), cg)
		assertLimits(t, cg)
		conf, _ := os.ReadFile(filepath.Join(c.bundle, criu.ConfName))
		if strings.Contains(string(conf), criu.ManageCgroupsIgnore) {
			t.Errorf("%s stays in the bundle's CRIU configuration after the restore:\n%s", criu.ManageCgroupsIgnore, conf)
		}
	})
}

// A child cgroup the container made comes back flattened into the
// container's own cgroup: CRIU recreates no cgroup in ignore mode.
func TestConfineCgroupChildFlattened(t *testing.T) {
	c, cg := cgContainer(t)
	c.Edit(func(s *specs.Spec) {
		for i, m := range s.Mounts {
			if m.Destination == "/sys/fs/cgroup" {
				s.Mounts[i].Options = []string{"nosuid", "noexec", "nodev", "relatime"}
			}
			if m.Destination == "/sys" {
				s.Mounts[i].Options = []string{"nosuid", "noexec", "nodev"}
			}
		}
		s.Process.Args = []string{"/bin/sh", "-c", "mkdir /sys/fs/cgroup/pids/child && echo $$ > /sys/fs/cgroup/pids/child/cgroup.procs && " + cfLoop}
	})
	c.Start()
	data, _ := os.ReadFile("/proc/" + c.initPID() + "/cgroup")
	if !strings.Contains(string(data), "pids:"+cg+"/child") {
		t.Fatalf("the container's init is not in its child cgroup:\n%s", data)
	}
	img := c.Checkpoint()
	c.restored(img)
	assertInCgroup(t, c.initPID(), cg)
	t.Cleanup(func() { _ = os.Remove(filepath.Join("/sys/fs/cgroup/pids", cg, "child")) })
}

// An OOM score and a hard limit the spec does not give are refused.
func TestConfineLimits(t *testing.T) {
	c := newCFContainer(t, func(s *specs.Spec) {
		s.Process.OOMScoreAdj = intp(100)
		s.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}}
	})
	c.Start()
	img := c.Checkpoint()
	t.Run("oom_score_adj", func(t *testing.T) {
		c.t = t
		edited := harness.CopyDir(t, img)
		harness.EditImage(t, edited, "core-1.img", &criucore.CoreEntry{}, func(m proto.Message) {
			m.(*criucore.CoreEntry).GetTc().OomScoreAdj = proto.Int32(-1000)
		})
		c.Refused(edited, "oom_score_adj is -1000", "100 or more (process.oomScoreAdj)")
	})
	t.Run("rlimit", func(t *testing.T) {
		c.t = t
		edited := harness.CopyDir(t, img)
		harness.EditImage(t, edited, "core-1.img", &criucore.CoreEntry{}, func(m proto.Message) {
			r := m.(*criucore.CoreEntry).GetTc().GetRlimits().GetRlimits()[7] // RLIMIT_NOFILE
			r.Max = proto.Uint64(20000)
		})
		c.Refused(edited, "rlimit RLIMIT_NOFILE (hard) is 20000", "1024 at most")
	})
	t.Run("restores with the spec's", func(t *testing.T) {
		c.t = t
		c.restored(img)
		score, _ := os.ReadFile("/proc/" + c.initPID() + "/oom_score_adj")
		if strings.TrimSpace(string(score)) != "100" {
			t.Errorf("restored oom_score_adj = %q, want the spec's 100", score)
		}
	})
}

func intp(v int) *int { return &v }

// A spec with a cgroup namespace restores in CRIU's default mode (ignore
// would bring the tasks back in the host's cgroup namespace): the tasks
// come back in the container's cgroup and in a cgroup namespace of their
// own rooted there, and the crafted image is refused by the check.
func TestConfineCgroupNamespace(t *testing.T) {
	c, cg := cgContainer(t)
	c.Edit(func(s *specs.Spec) {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	})
	c.Start()
	img := c.Checkpoint()
	t.Run("root slash", func(t *testing.T) {
		c.t = t
		c.Refused(harness.Crafted(t, img, func(string) string { return "/" }, func(string) string { return "/" }), "cgroup path (cgroup v2, set", "outside the container's cgroup")
	})
	t.Run("restored", func(t *testing.T) {
		c.t = t
		c.restored(img)
		pid := c.initPID()
		assertInCgroup(t, pid, cg)
		assertLimits(t, cg)
		host, _ := os.Readlink("/proc/self/ns/cgroup")
		got, err := os.Readlink("/proc/" + pid + "/ns/cgroup")
		if err != nil || got == host {
			t.Errorf("the restored task's cgroup namespace is %q (%v), the host's is %q", got, err, host)
		}
		inside := harness.Run(t, 10*time.Second, nil, "/usr/sbin/runc", "--root", c.root, "exec", c.id, "/bin/cat", "/proc/1/cgroup")
		for _, l := range strings.Split(strings.TrimSpace(inside), "\n") {
			if !strings.HasSuffix(l, ":/") {
				t.Errorf("inside its cgroup namespace the task sees %q, want its root", l)
			}
		}
	})
}
