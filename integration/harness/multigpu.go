package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// fakeHost is a fake GPU host of H100s, GPU i at /dev/nvidia<i>.
type fakeHost struct{ fakecuda.Host }

func NewFakeHost(n int, prefix string) fakeHost { return fakeHost{fakecuda.NewHost(n, prefix)} }

// env points cryo at the fake driver on this host.
func (h fakeHost) Env(t *testing.T) []string {
	return append(FakeDriverEnv(t, ""), "CRYO_FAKE_GPUS="+h.GPUs, "CRYO_RUNC=/usr/sbin/runc")
}

// MgContainer is a fakecuda-app container run by cryo-runc.
type MgContainer struct {
	T                     *testing.T
	Host                  fakeHost
	dir, Bundle, Root, ID string
	Out                   *testsupport.Buffer
}

// NewMGContainer prepares a container that is given the GPUs gpus of host
// (by index); appEnv goes into the container's environment.
func NewMGContainer(t *testing.T, host fakeHost, gpus []int, appEnv ...string) *MgContainer {
	RequireRoot(t)
	dir := t.TempDir()
	c := &MgContainer{T: t, Host: host, dir: dir, Bundle: RwBundle(t, filepath.Join(dir, "bundle")),
		Root: filepath.Join(dir, "runc-root"), ID: fmt.Sprintf("cryo-mg-%d-%d", os.Getpid(), time.Now().UnixNano()%100000)}
	c.Edit(func(s *specs.Spec) {
		s.Process.Env = append(s.Process.Env, append([]string{"CRYO_FAKE_GPUS=" + host.GPUs}, appEnv...)...)
	})
	c.Give(gpus...)
	t.Cleanup(func() { RunErr(10*time.Second, nil, "/usr/sbin/runc", "--root", c.Root, "delete", "-f", c.ID) })
	return c
}

func (c *MgContainer) Edit(f func(*specs.Spec)) {
	path := filepath.Join(c.Bundle, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		c.T.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		c.T.Fatal(err)
	}
	f(&s)
	if data, err = json.Marshal(&s); err != nil {
		c.T.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		c.T.Fatal(err)
	}
}

// give makes the spec name the GPUs gpus (as a device plugin or CDI does):
// their stand-in nodes and a device-cgroup rule for them (GiveStandIns).
func (c *MgContainer) Give(gpus ...int) {
	c.Edit(func(s *specs.Spec) { GiveStandIns(s, gpus...) })
}

func (c *MgContainer) CryoRunc(env []string, args ...string) string {
	c.T.Helper()
	return Run(c.T, 2*time.Minute, append(c.Host.Env(c.T), env...), CryoBin(c.T, "cryo-runc"), append([]string{"--root", c.Root}, args...)...)
}

func (c *MgContainer) Start() {
	c.T.Helper()
	c.Out = RwRunDetached(c.T, c.Host.Env(c.T), CryoBin(c.T, "cryo-runc"), "--root", c.Root, "run", "-d", "--bundle", c.Bundle, c.ID)
	c.WaitTicks(3)
}

func (c *MgContainer) WaitTicks(n int) {
	c.T.Helper()
	WaitFor(c.T, 20*time.Second, "tick "+strconv.Itoa(n), func() bool {
		if strings.Contains(c.Out.String(), "sum=BAD") {
			c.T.Fatalf("the app lost its device memory:\n%s", c.Out)
		}
		return RwLastTick(c.Out.String()) >= n
	})
}

// checkpoint stops the container into a new image directory.
func (c *MgContainer) Checkpoint(name string) string {
	c.T.Helper()
	img := filepath.Join(c.dir, name)
	c.CryoRunc(nil, "checkpoint", "--image-path", img, "--work-path", img+"-work", c.ID)
	return img
}

// restore restores img with the spec as it is now and checks that the app
// carries on from where it was.
func (c *MgContainer) Restore(img string, env ...string) {
	c.T.Helper()
	before := RwLastTick(c.Out.String())
	c.Out = RwRunDetached(c.T, append(c.Host.Env(c.T), env...), CryoBin(c.T, "cryo-runc"), "--root", c.Root,
		"restore", "-d", "--image-path", img, "--work-path", img+"-rwork", "--bundle", c.Bundle, c.ID)
	c.WaitTicks(before + 3)
	if first := rwFirstTick(c.Out.String()); first <= 1 {
		c.T.Fatalf("the restored app started over:\n%s", c.Out)
	}
}

func (c *MgContainer) RestoreFails(img string, env ...string) string {
	c.T.Helper()
	out, err := RunErr(time.Minute, append(c.Host.Env(c.T), env...), CryoBin(c.T, "cryo-runc"), "--root", c.Root,
		"restore", "-d", "--image-path", img, "--work-path", img+"-fwork", "--bundle", c.Bundle, c.ID)
	if err == nil {
		c.T.Fatalf("restore succeeded, want a refusal:\n%s", out)
	}
	return out
}

func (c *MgContainer) PID() int {
	c.T.Helper()
	out := Run(c.T, 10*time.Second, nil, "/usr/sbin/runc", "--root", c.Root, "state", c.ID)
	var st struct{ Pid int }
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Pid == 0 {
		c.T.Fatalf("runc state: %v %s", err, out)
	}
	return st.Pid
}

// assertOn checks that the app runs on exactly the GPUs want (indices).
func (c *MgContainer) AssertOn(want ...int) {
	c.T.Helper()
	assertRunsOn(c.T, c.PID(), c.Host, want...)
}

// assertRunsOn checks a fake CUDA process on the GPUs want of h: the
// driver's view (its page), the device files it holds, and its /dev.
func assertRunsOn(t testing.TB, pid int, h fakeHost, want ...int) {
	t.Helper()
	page, err := fakecuda.ReadPage(pid)
	if err != nil {
		t.Fatal(err)
	}
	var got, wantU []string
	for _, g := range page.GPUs {
		got = append(got, g.UUID)
	}
	seen := map[string]bool{}
	for _, w := range want {
		wantU = append(wantU, h.UUIDs[w])
		seen[fmt.Sprintf("nvidia%d", w)] = true
	}
	nodes := sortedNames(seen)
	if strings.Join(got, ",") != strings.Join(wantU, ",") {
		t.Fatalf("pid %d runs on %v, want %v", pid, got, wantU)
	}
	if held := heldNodes(pid); strings.Join(held, ",") != strings.Join(nodes, ",") {
		t.Fatalf("pid %d holds %v open, want %v", pid, held, nodes)
	}
	if dev := devNodes(pid); strings.Join(dev, ",") != strings.Join(nodes, ",") {
		t.Fatalf("the /dev of pid %d has %v, want %v", pid, dev, nodes)
	}
}

// heldNodes are the /dev/nvidiaN a process holds open, by name, sorted.
func heldNodes(pid int) []string {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	seen := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "/dev/nvidia") {
			seen[filepath.Base(l)] = true
		}
	}
	return sortedNames(seen)
}

// devNodes are the nvidiaN entries of a process's /dev.
func devNodes(pid int) []string {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/root/dev", pid))
	seen := map[string]bool{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "nvidia") {
			seen[e.Name()] = true
		}
	}
	return sortedNames(seen)
}

func sortedNames(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func rwFirstTick(s string) int {
	m := FakeTickRE.FindStringSubmatch(s)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
