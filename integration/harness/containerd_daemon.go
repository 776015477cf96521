package harness

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

// CtrdVersion is one containerd release line the shim must serve.
type CtrdVersion struct {
	Name          string // subtest name
	Dir           string // under DepsDir(): containerd-1.7 or containerd-2
	ConfigVersion int    // config.toml schema: 2 for 1.7, 3 for 2.x
}

var CtrdVersions = []CtrdVersion{
	{Name: "containerd-1.7", Dir: "containerd-1.7", ConfigVersion: 2},
	{Name: "containerd-2", Dir: "containerd-2", ConfigVersion: 3},
}

const CryoRuntime = "io.containerd.cryo.v2"

// TestNamespace is this test process's containerd namespace. The shims keep
// runc's state and the cgroups under the namespace's name, host-wide, so two
// test runs on one host must not share it.
var TestNamespace = fmt.Sprintf("cryo-test-%d", os.Getpid())

// Daemon is a private containerd: its own root, state, sockets and log
// under a temporary directory, with cryo's bin/ first in PATH so that it
// finds containerd-shim-cryo-v2, and the fake CUDA driver in its
// environment, which the shims inherit.
type Daemon struct {
	T         testing.TB
	V         CtrdVersion
	Dir       string
	Bin       string // containerd's usr/bin
	Socket    string
	Faults    string // CRYO_FAKE_CUDA_FAULTS
	daemonLog string
	Cmd       *exec.Cmd
	Client    *client.Client
	gpu       bool   // the real NVIDIA driver, not the fake one
	CRI       string // the CRI plugin's configuration; empty: CRI disabled
	// criu, when set before start, is containerd's CRYO_CRIU.
	CRIU *LoggingCRIU
	// envExtra, set before start, is added to containerd's environment
	// last (a later PATH wins).
	EnvExtra []string
	// pidFile, when set before start, makes containerd run under a loop
	// that starts it again whenever it exits, as systemd's Restart= does,
	// and writes its pid there: a test restarts it with a SIGTERM.
	PIDFile string
}

func StartDaemon(t testing.TB, v CtrdVersion) *Daemon {
	t.Helper()
	return StartDaemonWith(t, v, false)
}

// StartDaemonWith starts a daemon on the real GPU driver (gpu) or the fake one.
func StartDaemonWith(t testing.TB, v CtrdVersion, gpu bool) *Daemon {
	t.Helper()
	d := NewDaemon(t, v, gpu)
	d.Start()
	return d
}

// NewDaemon prepares a daemon's temporary directory and its cleanup,
// without starting it.
func NewDaemon(t testing.TB, v CtrdVersion, gpu bool) *Daemon {
	t.Helper()
	RequireRoot(t)
	// Short base path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cryo-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{T: t, V: v, Dir: dir, gpu: gpu, Bin: filepath.Join(DepsDir(), v.Dir, "usr/bin"),
		Socket: filepath.Join(dir, "c.sock"), Faults: filepath.Join(dir, "faults"), daemonLog: filepath.Join(dir, "containerd.log")}
	if _, err := os.Stat(filepath.Join(d.Bin, "containerd")); err != nil {
		t.Fatalf("%s: containerd missing (%v): run `make deps`", v.Name, err)
	}
	CryoBin(t, "containerd-shim-cryo-v2")
	if err := os.MkdirAll(d.Faults, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

func (d *Daemon) config() string {
	var b strings.Builder
	fmt.Fprintf(&b, "version = %d\nroot = %q\nstate = %q\n", d.V.ConfigVersion, filepath.Join(d.Dir, "root"), filepath.Join(d.Dir, "state"))
	// The CRI plugin is needed only by the CRI tests; leaving it out keeps
	// the daemon's start fast. contrib/containerd/ has the CRI runtime entries.
	if d.CRI != "" {
		b.WriteString(d.CRI)
	} else if d.V.ConfigVersion >= 3 {
		b.WriteString(`disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", "io.containerd.podsandbox.controller.v1.podsandbox", "io.containerd.sandbox.controller.v1.shim"]` + "\n")
	} else {
		b.WriteString(`disabled_plugins = ["io.containerd.grpc.v1.cri"]` + "\n")
	}
	fmt.Fprintf(&b, "[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n", d.Socket, d.Socket+".ttrpc")
	fmt.Fprintf(&b, "[debug]\n  address = %q\n  level = \"info\"\n", filepath.Join(d.Dir, "debug.sock"))
	return b.String()
}

func (d *Daemon) Env() []string {
	path := BinDir() + ":" + d.Bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + os.Getenv("PATH")
	env := []string{"PATH=" + path}
	if d.CRIU != nil {
		env = append(env, "CRYO_CRIU="+d.CRIU.Path)
	}
	if !d.gpu {
		env = append(env, append(FakeDriverEnv(d.T, d.Faults), "CRYO_FAKE_GPUS_FILE="+d.GpusFile())...)
	}
	return append(env, d.EnvExtra...)
}

func (d *Daemon) Start() {
	t := d.T
	cfg := filepath.Join(d.Dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(d.config()), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(d.daemonLog)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d.Cmd = exec.Command(filepath.Join(d.Bin, "containerd"), "--config", cfg)
	if d.PIDFile != "" {
		d.Cmd = exec.Command("/bin/sh", "-c", `while :; do "$0" --config "$1" & echo $! >"$2"; wait $!; sleep 0.2; done`,
			filepath.Join(d.Bin, "containerd"), cfg, d.PIDFile)
	}
	d.Cmd.Env = append(os.Environ(), d.Env()...)
	d.Cmd.Stdout, d.Cmd.Stderr = logf, logf
	d.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 30*time.Second, d.V.Name+" socket", func() bool {
		_, err := os.Stat(d.Socket)
		return err == nil
	})
	c, err := client.New(d.Socket, client.WithDefaultNamespace(TestNamespace), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("%s: connect: %v\n%s", d.V.Name, err, d.Log())
	}
	d.Client = c
}

// NamespacedCtx is a context in the test namespace.
func NamespacedCtx() context.Context {
	return namespaces.WithNamespace(context.Background(), TestNamespace)
}

// ctr runs ctr of the same release against the daemon.
func (d *Daemon) Ctr(args ...string) string {
	d.T.Helper()
	out, err := d.CtrErr(args...)
	if err != nil {
		d.T.Fatalf("ctr %s: %v\n%s\n--- containerd log (tail) ---\n%s", strings.Join(args, " "), err, out, LastLines(d.Log(), 40))
	}
	return out
}

func (d *Daemon) CtrErr(args ...string) (string, error) {
	return d.CtrBinErr(filepath.Join(d.Bin, "ctr"), args...)
}

// ctrBinErr runs a given ctr binary against the daemon.
func (d *Daemon) CtrBinErr(ctr string, args ...string) (string, error) {
	full := append([]string{"--address", d.Socket, "--namespace", TestNamespace}, args...)
	return RunErr(2*time.Minute, d.Env(), ctr, full...)
}

// ctrWithOptions is the ctr that passes checkpoint options (--exit,
// --image-path, --work-path) to the cryo runtime. ctr 1.7 passes them only
// to runtimes named io.containerd.runc.*; ctr 2.x passes them to any
// runtime and works against a containerd 1.7 daemon.
func (d *Daemon) CtrWithOptions() string {
	return filepath.Join(DepsDir(), "containerd-2", "usr/bin/ctr")
}

func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.daemonLog)
	return string(b)
}

// stop kills every task, the daemon and its shims, unmounts what is left
// under the temporary directory and removes it.
func (d *Daemon) Stop() {
	if d.Client != nil {
		d.killAll()
		d.Client.Close()
	}
	if d.Cmd != nil && d.Cmd.Process != nil {
		_ = syscall.Kill(-d.Cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = d.Cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-d.Cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	killShims(d.Dir)
	unmountUnder(d.Dir)
	if os.Getenv("CRYO_KEEP") == "" {
		_ = os.RemoveAll(d.Dir)
	} else {
		d.T.Logf("kept %s", d.Dir)
	}
}

// killAll deletes every task and container of the test namespace.
func (d *Daemon) killAll() { d.KillAllIn(TestNamespace) }

// killAllIn deletes every task and container of namespace ns.
func (d *Daemon) KillAllIn(ns string) {
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ns), 30*time.Second)
	defer cancel()
	cs, err := d.Client.Containers(ctx)
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

func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
