package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
)

// ctrdVersion is one containerd release line the shim must serve.
type ctrdVersion struct {
	name          string // subtest name
	dir           string // under depsDir(): containerd-1.7 or containerd-2
	configVersion int    // config.toml schema: 2 for 1.7, 3 for 2.x
}

var ctrdVersions = []ctrdVersion{
	{name: "containerd-1.7", dir: "containerd-1.7", configVersion: 2},
	{name: "containerd-2", dir: "containerd-2", configVersion: 3},
}

const cryoRuntime = "io.containerd.cryo.v2"

// testNamespace is this test process's containerd namespace. The shims keep
// runc's state and the cgroups under the namespace's name, host-wide, so two
// test runs on one host must not share it.
var testNamespace = fmt.Sprintf("cryo-test-%d", os.Getpid())

// daemon is a private containerd: its own root, state, sockets and log
// under a temporary directory, with cryo's bin/ first in PATH so that it
// finds containerd-shim-cryo-v2, and the fake CUDA driver in its
// environment, which the shims inherit.
type daemon struct {
	t         testing.TB
	v         ctrdVersion
	dir       string
	bin       string // containerd's usr/bin
	socket    string
	faults    string // CRYO_FAKE_CUDA_FAULTS
	daemonLog string
	cmd       *exec.Cmd
	client    *client.Client
	gpu       bool   // the real NVIDIA driver, not the fake one
	cri       string // the CRI plugin's configuration; empty: CRI disabled
	// criu, when set before start, is containerd's CRYO_CRIU.
	criu *loggingCRIU
	// envExtra, set before start, is added to containerd's environment
	// last (a later PATH wins).
	envExtra []string
	// pidFile, when set before start, makes containerd run under a loop
	// that starts it again whenever it exits, as systemd's Restart= does,
	// and writes its pid there: a test restarts it with a SIGTERM.
	pidFile string
}

func startDaemon(t testing.TB, v ctrdVersion) *daemon {
	t.Helper()
	return startDaemonWith(t, v, false)
}

// startDaemonWith starts a daemon on the real GPU driver (gpu) or the fake one.
func startDaemonWith(t testing.TB, v ctrdVersion, gpu bool) *daemon {
	t.Helper()
	d := newDaemon(t, v, gpu)
	d.start()
	return d
}

// newDaemon prepares a daemon's temporary directory and its cleanup,
// without starting it.
func newDaemon(t testing.TB, v ctrdVersion, gpu bool) *daemon {
	t.Helper()
	requireRoot(t)
	// Short base path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cryo-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, v: v, dir: dir, gpu: gpu, bin: filepath.Join(depsDir(), v.dir, "usr/bin"),
		socket: filepath.Join(dir, "c.sock"), faults: filepath.Join(dir, "faults"), daemonLog: filepath.Join(dir, "containerd.log")}
	if _, err := os.Stat(filepath.Join(d.bin, "containerd")); err != nil {
		t.Fatalf("%s: containerd missing (%v): run `make deps`", v.name, err)
	}
	cryoBin(t, "containerd-shim-cryo-v2")
	if err := os.MkdirAll(d.faults, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	return d
}

func (d *daemon) config() string {
	var b strings.Builder
	fmt.Fprintf(&b, "version = %d\nroot = %q\nstate = %q\n", d.v.configVersion, filepath.Join(d.dir, "root"), filepath.Join(d.dir, "state"))
	// The CRI plugin is needed only by the CRI tests; leaving it out keeps
	// the daemon's start fast. contrib/containerd/ has the CRI runtime entries.
	if d.cri != "" {
		b.WriteString(d.cri)
	} else if d.v.configVersion >= 3 {
		b.WriteString(`disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.podsandbox.controller.v1.podsandbox", "io.containerd.sandbox.controller.v1.shim"]` + "\n")
	} else {
		b.WriteString(`disabled_plugins = ["io.containerd.grpc.v1.cri"]` + "\n")
	}
	fmt.Fprintf(&b, "[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n", d.socket, d.socket+".ttrpc")
	fmt.Fprintf(&b, "[debug]\n  address = %q\n  level = \"info\"\n", filepath.Join(d.dir, "debug.sock"))
	return b.String()
}

func (d *daemon) env() []string {
	path := binDir() + ":" + d.bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + os.Getenv("PATH")
	env := []string{"PATH=" + path}
	if d.criu != nil {
		env = append(env, "CRYO_CRIU="+d.criu.path)
	}
	if !d.gpu {
		env = append(env, append(fakeDriverEnv(d.t, d.faults), "CRYO_FAKE_GPUS_FILE="+d.gpusFile())...)
	}
	return append(env, d.envExtra...)
}

func (d *daemon) start() {
	t := d.t
	cfg := filepath.Join(d.dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(d.config()), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(d.daemonLog)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d.cmd = exec.Command(filepath.Join(d.bin, "containerd"), "--config", cfg)
	if d.pidFile != "" {
		d.cmd = exec.Command("/bin/sh", "-c", `while :; do "$0" --config "$1" & echo $! >"$2"; wait $!; sleep 0.2; done`,
			filepath.Join(d.bin, "containerd"), cfg, d.pidFile)
	}
	d.cmd.Env = append(os.Environ(), d.env()...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, d.v.name+" socket", func() bool {
		_, err := os.Stat(d.socket)
		return err == nil
	})
	c, err := client.New(d.socket, client.WithDefaultNamespace(testNamespace), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("%s: connect: %v\n%s", d.v.name, err, d.log())
	}
	d.client = c
}

// namespacedCtx is a context in the test namespace.
func namespacedCtx() context.Context {
	return namespaces.WithNamespace(context.Background(), testNamespace)
}

// ctr runs ctr of the same release against the daemon.
func (d *daemon) ctr(args ...string) string {
	d.t.Helper()
	out, err := d.ctrErr(args...)
	if err != nil {
		d.t.Fatalf("ctr %s: %v\n%s\n--- containerd log (tail) ---\n%s", strings.Join(args, " "), err, out, lastLines(d.log(), 40))
	}
	return out
}

func (d *daemon) ctrErr(args ...string) (string, error) {
	return d.ctrBinErr(filepath.Join(d.bin, "ctr"), args...)
}

// ctrBinErr runs a given ctr binary against the daemon.
func (d *daemon) ctrBinErr(ctr string, args ...string) (string, error) {
	full := append([]string{"--address", d.socket, "--namespace", testNamespace}, args...)
	return runErr(2*time.Minute, d.env(), ctr, full...)
}

// ctrWithOptions is the ctr that passes checkpoint options (--exit,
// --image-path, --work-path) to the cryo runtime. ctr 1.7 passes them only
// to runtimes named io.containerd.runc.*; ctr 2.x passes them to any
// runtime and works against a containerd 1.7 daemon.
func (d *daemon) ctrWithOptions() string {
	return filepath.Join(depsDir(), "containerd-2", "usr/bin/ctr")
}

func (d *daemon) log() string {
	b, _ := os.ReadFile(d.daemonLog)
	return string(b)
}

// stop kills every task, the daemon and its shims, unmounts what is left
// under the temporary directory and removes it.
func (d *daemon) stop() {
	if d.client != nil {
		d.killAll()
		d.client.Close()
	}
	if d.cmd != nil && d.cmd.Process != nil {
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	killShims(d.dir)
	unmountUnder(d.dir)
	if os.Getenv("CRYO_KEEP") == "" {
		_ = os.RemoveAll(d.dir)
	} else {
		d.t.Logf("kept %s", d.dir)
	}
}

// killAll deletes every task and container of the test namespace.
func (d *daemon) killAll() { d.killAllIn(testNamespace) }

// killAllIn deletes every task and container of namespace ns.
func (d *daemon) killAllIn(ns string) {
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ns), 30*time.Second)
	defer cancel()
	cs, err := d.client.Containers(ctx)
	if err != nil {
		return
	}
	for _, c := range cs {
		if task, err := c.Task(ctx, nil); err == nil {
			_ = task.Kill(ctx, syscall.SIGKILL)
			if ch, err := task.Wait(ctx); err == nil {
				select {
				case <-ch:
				case <-time.After(5 * time.Second):
				}
			}
			_, _ = task.Delete(ctx, client.WithProcessKill)
		}
		_ = c.Delete(ctx, client.WithSnapshotCleanup)
	}
}

// killShims kills the shims whose working directory lies under dir (their
// bundles are in the daemon's state directory).
func killShims(dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, p := range procs {
		cwd, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(cwd, dir) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cwd", &pid); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
