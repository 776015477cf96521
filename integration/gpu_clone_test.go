package integration

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

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	specs "github.com/opencontainers/runtime-spec/specs-go"
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
	copyFile(t, filepath.Join(binDir(), "busybox"), filepath.Join(root, "bin/busybox"), 0o755)
	_ = os.Symlink("busybox", filepath.Join(root, "bin/sleep"))
	s := baseSpec("/bin/sleep", "600")
	withPrivateNet(s)
	writeSpec(t, dir, s)
	runc := rawRunc()
	state := filepath.Join(dir, "state")
	id := "cryo-netns-probe"
	defer func() { _, _ = runErr(30*time.Second, nil, runc, "--root", state, "delete", "--force", id) }()
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
	if out, err := runErr(time.Minute, nil, runc, "--root", state, "checkpoint", "--leave-running", "--image-path", img, id); err != nil {
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
	return e.step + ": " + e.err.Error() + ": " + strings.TrimSpace(tail(e.out, 6))
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
		wrap := cryoBin(t, "cryo-runc")
		c := newGPUContainer(t, wrap, "cryo-gpu-orig")
		s := newGPUSpec(t, "/bin/cudamem", gpuMiB(), "100")
		withPrivateNet(s)
		writeSpec(t, c.bundle, s)
		c.start("run", "-d", "--bundle", c.bundle, c.id)
		c.ticksAfter(2, "first ticks")
		img := filepath.Join(t.TempDir(), "img")
		report(t, "clone (cryo-runc): checkpoint --leave-running", c.checkpoint(img, "--leave-running"))
		at := lastTick(t, c.log.String())
		clone := &runcContainer{t: t, runc: wrap, root: c.root, bundle: c.bundle, id: "cryo-gpu-clone", log: &testsupport.Buffer{}}
		t.Cleanup(clone.remove)
		report(t, "clone (cryo-runc): restore as a second container", clone.restore(img))
		got := clone.ticksAfter(at-1, "the clone's ticks")
		c.ticksAfter(lastTick(t, c.log.String()), "the original's ticks next to its clone")
		t.Logf("original at tick %d, clone continued from the checkpoint at tick %d", lastTick(t, c.log.String()), got)
	})
	t.Run("shim", func(t *testing.T) {
		d := startDaemonWith(t, ctrdVersions[1], true)
		dir := filepath.Join(d.dir, "gpu-image")
		buildImageTarAs(t, gpuRootfs(t, dir), filepath.Join(dir, "image.tar"), gpuImage, []string{"/bin/cudamem"})
		d.ctr("images", "import", "--all-platforms", filepath.Join(dir, "image.tar"))
		_ = os.MkdirAll(filepath.Join(d.dir, "logs"), 0o755)
		c := d.newGPUContainerNet(t, "gpu", false)
		d.startGPUTask(t, c)
		waitTicks(t, func() string { return readFile(d.logPath("gpu")) }, 2, "first ticks")
		cref := "localhost/cryo/checkpoint:clone"
		start := time.Now()
		d.ctr("container", "checkpoint", "--task", "--rw", "gpu", cref)
		report(t, "clone (shim): ctr container checkpoint --task", time.Since(start))
		at := lastTick(t, readFile(d.logPath("gpu")))
		start = time.Now()
		d.ctr("container", "restore", "--live", "--rw", "gpu-clone", cref)
		report(t, "clone (shim): ctr container restore under a new name", time.Since(start))
		d.attach("gpu-clone")
		got := waitTicks(t, func() string { return readFile(d.logPath("gpu-clone")) }, at-1, "the clone's ticks")
		waitTicks(t, func() string { return readFile(d.logPath("gpu")) }, lastTick(t, readFile(d.logPath("gpu"))), "the original's ticks next to its clone")
		t.Logf("clone continued from tick %d; the original runs on", got)
		d.remove("gpu-clone")
		d.remove("gpu")
	})
}

// newGPUContainerNet is newGPUContainer with the host's network (hostNet)
// or a network namespace of its own.
func (d *daemon) newGPUContainerNet(t *testing.T, id string, hostNet bool) client.Container {
	t.Helper()
	return d.newCryoContainer(t, id, gpuImage, []string{"/bin/cudamem", gpuMiB(), "100"}, hostNet, true)
}

// newCryoContainer creates a container of image running args on the cryo
// runtime, with the host's network (hostNet) and the GPU devices (gpu), or
// else the fake driver's GPU 0 (a stand-in node).
func (d *daemon) newCryoContainer(t testing.TB, id, image string, args []string, hostNet, gpu bool) client.Container {
	t.Helper()
	ctx := namespacedCtx()
	img, err := d.client.GetImage(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	opts := []oci.SpecOpts{oci.WithImageConfig(img), oci.WithProcessArgs(args...), oci.WithEnv([]string{"LD_LIBRARY_PATH=/usr/lib"})}
	if hostNet {
		opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace))
	}
	if gpu {
		for _, dev := range gpuDevices {
			opts = append(opts, oci.WithLinuxDevice(dev, "rwm"))
		}
	} else {
		opts = append(opts, withStandIns(0)) // the fake driver's GPU 0
	}
	c, err := d.client.NewContainer(ctx, id, client.WithImage(img), client.WithNewSnapshot(id+"-snap", img),
		client.WithRuntime(cryoRuntime, nil), client.WithNewSpec(opts...))
	if err != nil {
		t.Fatalf("new container %s: %v", id, err)
	}
	return c
}
