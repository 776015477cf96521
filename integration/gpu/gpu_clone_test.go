package gpu

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// A clone runs next to its original, so each needs its own network
// namespace: a CUDA process binds an abstract unix socket, which lives in
// the network namespace. CRIU checkpoints a container's own network
// namespace with `ip` and iptables (the bundle of `make dist` carries both);
// netnsProbe tells whether it can on this host.
var netnsProbe struct {
	once sync.Once
	err  error
}

// privateNetOrSkip skips the test, with the reason, where CRIU cannot
// checkpoint a container that has its own network namespace.
func privateNetOrSkip(t *testing.T) {
	t.Helper()
	netnsProbe.once.Do(func() { netnsProbe.err = probePrivateNet(t) })
	if netnsProbe.err != nil {
		t.Skipf("a clone needs its own network namespace, and CRIU cannot checkpoint one on this host: %v", netnsProbe.err)
	}
}

// probePrivateNet checkpoints (leave-running) a busybox container that has
// its own network namespace, with plain runc.
func probePrivateNet(t *testing.T) error {
	dir, err := os.MkdirTemp("", "cryo-netns-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "rootfs")
	_ = os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		_ = os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	harness.CopyFile(t, filepath.Join(harness.BinDir(), "busybox"), filepath.Join(root, "bin/busybox"), 0o755)
	_ = os.Symlink("busybox", filepath.Join(root, "bin/sleep"))
	s := harness.BaseSpec("/bin/sleep", "600")
	withPrivateNet(s)
	harness.WriteSpec(t, dir, s)
	runc := rawRunc()
	state := filepath.Join(dir, "state")
	id := "cryo-netns-probe"
	defer func() { _, _ = harness.RunErr(30*time.Second, nil, runc, "--root", state, "delete", "--force", id) }()
	// The detached container keeps runc's stdio: a pipe (CRIU dumps pipes,
	// not host files) that this process stops reading at the end.
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	out := &testsupport.Buffer{}
	go func() { _, _ = io.Copy(out, r) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runc, "--root", state, "run", "-d", "--bundle", dir, id)
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Run()
	w.Close()
	if err != nil {
		return &probeError{"runc run", out.String(), err}
	}
	img := filepath.Join(dir, "img")
	if out, err := harness.RunErr(time.Minute, nil, runc, "--root", state, "checkpoint", "--leave-running", "--image-path", img, id); err != nil {
		log, _ := os.ReadFile(filepath.Join(img, "dump.log"))
		return &probeError{"runc checkpoint", out + "\n" + grepErrors(string(log)), err}
	}
	return nil
}

type probeError struct {
	step, out string
	err       error
}

func (e *probeError) Error() string {
	return e.step + ": " + e.err.Error() + ": " + strings.TrimSpace(harness.Tail(e.out, 6))
}

// grepErrors keeps the Error lines of a CRIU log.
func grepErrors(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "Error") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// withPrivateNet gives the spec a network namespace of its own (loopback only).
func withPrivateNet(s *specs.Spec) {
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
}

// rawRunc is the plain runc the tests compare with and that cryo-runc wraps.
func rawRunc() string {
	if r := os.Getenv("CRYO_RUNC"); r != "" {
		return r
	}
	return "runc"
}

// TestGPUClone: a leave-running checkpoint of the CUDA workload, restored as
// a second container while the first runs on, through cryo-runc and through
// containerd with the shim (`ctr container checkpoint --task`, then `ctr
// container restore` under a new name). Both verify their device memory
// and GPU counter on every tick.
func TestGPUClone(t *testing.T) {
	gpuOrSkip(t)
	privateNetOrSkip(t)
	t.Run("cryo-runc", func(t *testing.T) {
		wrap := harness.CryoBin(t, "cryo-runc")
		c := newGPUContainer(t, wrap, "cryo-gpu-orig")
		s := newGPUSpec(t, "/bin/cudamem", harness.GPUMiB(), "100")
		withPrivateNet(s)
		harness.WriteSpec(t, c.Bundle, s)
		c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
		c.TicksAfter(2, "first ticks")
		img := filepath.Join(t.TempDir(), "img")
		report(t, "clone (cryo-runc): checkpoint --leave-running", c.Checkpoint(img, "--leave-running"))
		at := harness.LastTick(t, c.Log.String())
		clone := &harness.RuncContainer{T: t, Runc: wrap, Root: c.Root, Bundle: c.Bundle, ID: "cryo-gpu-clone", Log: &testsupport.Buffer{}}
		t.Cleanup(clone.Remove)
		report(t, "clone (cryo-runc): restore as a second container", clone.Restore(img))
		got := clone.TicksAfter(at-1, "the clone's ticks")
		c.TicksAfter(harness.LastTick(t, c.Log.String()), "the original's ticks next to its clone")
		t.Logf("original at tick %d, clone continued from the checkpoint at tick %d", harness.LastTick(t, c.Log.String()), got)
	})
	t.Run("shim", func(t *testing.T) {
		d := harness.StartDaemonWith(t, harness.CtrdVersions[1], true)
		dir := filepath.Join(d.Dir, "gpu-image")
		harness.BuildImageTarAs(t, gpuRootfs(t, dir), filepath.Join(dir, "image.tar"), harness.GPUImage, []string{"/bin/cudamem"})
		d.Ctr("images", "import", "--all-platforms", filepath.Join(dir, "image.tar"))
		_ = os.MkdirAll(filepath.Join(d.Dir, "logs"), 0o755)
		c := d.NewGPUContainerNet(t, "gpu", false)
		d.StartGPUTask(t, c)
		harness.WaitTicks(t, func() string { return harness.ReadFile(d.LogPath("gpu")) }, 2, "first ticks")
		cref := "localhost/cryo/checkpoint:clone"
		start := time.Now()
		d.Ctr("container", "checkpoint", "--task", "--rw", "gpu", cref)
		report(t, "clone (shim): ctr container checkpoint --task", time.Since(start))
		at := harness.LastTick(t, harness.ReadFile(d.LogPath("gpu")))
		start = time.Now()
		d.Ctr("container", "restore", "--live", "--rw", "gpu-clone", cref)
		report(t, "clone (shim): ctr container restore under a new name", time.Since(start))
		d.Attach("gpu-clone")
		got := harness.WaitTicks(t, func() string { return harness.ReadFile(d.LogPath("gpu-clone")) }, at-1, "the clone's ticks")
		harness.WaitTicks(t, func() string { return harness.ReadFile(d.LogPath("gpu")) }, harness.LastTick(t, harness.ReadFile(d.LogPath("gpu"))), "the original's ticks next to its clone")
		t.Logf("clone continued from tick %d; the original runs on", got)
		d.Remove("gpu-clone")
		d.Remove("gpu")
	})
}
