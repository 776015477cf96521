package cli

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/opencontainers/runtime-spec/specs-go"
)

const nestedChild = "cryo-nested"

func TestCgroupNestedRestore(t *testing.T) {
	harness.RequireRoot(t)
	c := newNestedContainer(t)
	cg := "/" + c.id
	c.run("run", cg)
	init := c.initPID()
	child := waitChildShell(t, init)
	mounts := cgroupMounts(t)
	moved := moveToChild(t, child, mounts)
	t.Logf("host cgroup layout: %s; process %s moved into %s below the container's %s on %d hierarchies",
		cgroupLayout(), child, nestedChild, cg, moved)
	if !assertUnder(t, child, cg, mounts) {
		t.Fatalf("process %s is not in %s/%s", child, cg, nestedChild)
	}
	img := filepath.Join(c.dir, "img")
	harness.Run(t, 2*time.Minute, c.env, c.cryoRunc, "--root", c.root, "checkpoint", "--image-path", img, "--work-path", img+"-work", c.id)
	removeChildCgroups(cg, mounts)

	// A new container: another id, another cgroup.
	c.id += "-new"
	newCg := "/" + c.id
	c.run("restore", newCg, "--image-path", img, "--work-path", img+"-rwork")
	pids := procTree(t, c.initPID())
	if len(pids) < 2 {
		t.Fatalf("the restored tree has %d task(s), want the init and its child shell", len(pids))
	}
	kept := 0
	for _, pid := range pids {
		if assertUnder(t, pid, newCg, mounts) {
			kept++
		}
	}
	if kept == 0 {
		t.Logf("every one of the %d restored tasks is in the new container's cgroup %s itself: the child cgroup was flattened", len(pids), newCg)
	} else {
		t.Logf("%d of the %d restored tasks are in %s/%s: the child cgroup was kept", kept, len(pids), newCg, nestedChild)
	}
}

// nestedContainer is a busybox container run by cryo-runc, whose init
// runs a shell loop in the background. It uses the bundle's runc and
// busybox where it runs from `make dist`'s bundle (the GPU hosts).
type nestedContainer struct {
	t                       *testing.T
	dir, bundle, root, id   string
	runc, cryoRunc, busybox string
	env                     []string
}

func newNestedContainer(t *testing.T) *nestedContainer {
	dir := t.TempDir()
	c := &nestedContainer{t: t, dir: dir, bundle: filepath.Join(dir, "bundle"), root: filepath.Join(dir, "runc-root"),
		id:   fmt.Sprintf("cryo-nested-%d-%d", os.Getpid(), time.Now().UnixNano()%100000),
		runc: cmp.Or(os.Getenv("CRYO_RUNC"), "/usr/sbin/runc"), cryoRunc: harness.CryoBin(t, "cryo-runc"), busybox: "/bin/busybox"}
	if _, err := os.Stat(filepath.Join(harness.BinDir(), "busybox")); err == nil {
		c.busybox = filepath.Join(harness.BinDir(), "busybox")
	}
	c.env = []string{"CRYO_RUNC=" + c.runc}
	if _, err := os.Stat(filepath.Join(harness.BinDir(), "fake", "libcuda.so.1")); err == nil && os.Getenv("CRYO_LIBCUDA") == "" {
		c.env = append(c.env, harness.FakeDriverEnv(t, "")...)
	}
	root := filepath.Join(c.bundle, "rootfs")
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	harness.CopyFile(t, c.busybox, filepath.Join(root, "bin/busybox"), 0o755)
	for _, a := range []string{"sh", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	harness.Run(t, 10*time.Second, nil, c.runc, "spec", "--bundle", c.bundle)
	t.Cleanup(func() {
		for _, id := range []string{c.id, strings.TrimSuffix(c.id, "-new")} {
			harness.RunErr(10*time.Second, nil, c.runc, "--root", c.root, "delete", "-f", id)
			removeChildCgroups("/"+id, cgroupMounts(t))
		}
	})
	return c
}

// run runs or restores (op) the container, detached, in cgroup cg.
func (c *nestedContainer) run(op, cg string, args ...string) {
	c.t.Helper()
	(&harness.MgContainer{T: c.t, Bundle: c.bundle}).Edit(func(s *specs.Spec) {
		s.Process.Terminal = false
		s.Process.Args = []string{"/bin/sh", "-c", "(while :; do sleep 0.3; done) & while :; do sleep 0.2; done"}
		s.Root.Readonly = false
		s.Linux.CgroupsPath = cg
		// The host's network, as the GPU tests run: CRIU checkpoints a
		// network namespace of the container's own only where ip and
		// iptables work (gpu_clone_test.go), and cgroups are the point here.
		s.Linux.Namespaces = withoutNS(s.Linux.Namespaces, specs.NetworkNamespace)
	})
	harness.RwRunDetached(c.t, c.env, c.cryoRunc, append([]string{"--root", c.root, op, "-d", "--bundle", c.bundle}, append(args, c.id)...)...)
}

func (c *nestedContainer) initPID() string {
	c.t.Helper()
	out := harness.Run(c.t, 10*time.Second, nil, c.runc, "--root", c.root, "state", c.id)
	m := regexp.MustCompile(`"pid": (\d+)`).FindStringSubmatch(out)
	if m == nil {
		c.t.Fatalf("no pid in runc state:\n%s", out)
	}
	return m[1]
}

// cgroupLayout names the host's cgroup version.
func cgroupLayout() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "cgroup v2 (unified)"
	}
	return "cgroup v1 (hybrid: v2 at /sys/fs/cgroup/unified)"
}

// waitChildShell is the init's child that runs the loop in the
// background: a shell, where the init's other children are its sleeps.
func waitChildShell(t *testing.T, init string) string {
	t.Helper()
	var child string
	harness.WaitFor(t, 10*time.Second, "the container's child shell", func() bool {
		for _, pid := range procTree(t, init)[1:] {
			if comm, _ := os.ReadFile("/proc/" + pid + "/comm"); strings.TrimSpace(string(comm)) == "sh" {
				child = pid
				return true
			}
		}
		return false
	})
	return child
}

// procTree is pid and its descendants, pid first.
func procTree(t *testing.T, pid string) []string {
	t.Helper()
	out := []string{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir("/proc/" + out[i] + "/task")
		for _, task := range tasks {
			data, _ := os.ReadFile("/proc/" + out[i] + "/task/" + task.Name() + "/children")
			out = append(out, strings.Fields(string(data))...)
		}
	}
	return out
}

// cgroupMounts maps each hierarchy, as /proc/PID/cgroup names its
// controllers ("memory", "cpu,cpuacct", "name=systemd", "" for v2), to
// where it is mounted; a hierarchy mounted nowhere is not runc's.
func cgroupMounts(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		ctls := strings.SplitN(l, ":", 3)[1]
		for _, m := range strings.Split(string(data), "\n") {
			pre, post, ok := strings.Cut(m, " - ")
			f, g := strings.Fields(pre), strings.Fields(post)
			if !ok || len(f) < 5 || len(g) < 3 {
				continue
			}
			opts := strings.Split(g[2], ",")
			v2 := ctls == "" && g[0] == "cgroup2"
			v1 := ctls != "" && g[0] == "cgroup" && !slices.ContainsFunc(strings.Split(ctls, ","), func(c string) bool { return !slices.Contains(opts, c) })
			if _, seen := out[ctls]; (v1 || v2) && !seen {
				out[ctls] = f[4]
			}
		}
	}
	return out
}

// moveToChild makes the child cgroup below the container's on every
// hierarchy, from the host, and moves pid into it; it returns how many.
func moveToChild(t *testing.T, pid string, mounts map[string]string) int {
	t.Helper()
	n := 0
	for ctls, cur := range procCgroups(t, pid) {
		mnt, ok := mounts[ctls]
		if !ok {
			continue
		}
		parent := filepath.Join(mnt, cur)
		dir := filepath.Join(parent, nestedChild)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		// A v1 cpuset child starts with no CPUs and no memory nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(parent, f)); err == nil {
				_ = os.WriteFile(filepath.Join(dir, f), v, 0o644)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0o644); err != nil {
			t.Fatalf("move %s into %s: %v", pid, dir, err)
		}
		n++
	}
	return n
}

// procCgroups is pid's cgroup path by hierarchy.
func procCgroups(t *testing.T, pid string) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if p := strings.SplitN(l, ":", 3); len(p) == 3 {
			out[p[1]] = p[2]
		}
	}
	return out
}

// assertUnder: on every mounted hierarchy pid is in cg or below it; true
// when it is in cg's child cgroup on every one.
func assertUnder(t *testing.T, pid, cg string, mounts map[string]string) bool {
	t.Helper()
	inChild := true
	for ctls, p := range procCgroups(t, pid) {
		if _, ok := mounts[ctls]; !ok {
			continue
		}
		if p != cg && !strings.HasPrefix(p, cg+"/") {
			t.Errorf("task %s is in %s on hierarchy %q, outside the container's cgroup %s", pid, p, ctls, cg)
		}
		inChild = inChild && strings.HasSuffix(p, "/"+nestedChild)
	}
	return inChild
}

// removeChildCgroups removes the child cgroup below cg, then cg, on
// every hierarchy (empty once their tasks are gone; runc may still be
// removing them).
func removeChildCgroups(cg string, mounts map[string]string) {
	for _, mnt := range mounts {
		for _, d := range []string{filepath.Join(mnt, cg, nestedChild), filepath.Join(mnt, cg)} {
			for i := 0; i < 20; i++ {
				err := os.Remove(d)
				if err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}
