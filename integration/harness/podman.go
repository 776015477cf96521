package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PodmanImage is the image every Podman test runs: NewRootfs, imported.
const PodmanImage = "localhost/cryo-fakecuda:latest"

// PodmanEnv is a Podman with its own storage, run directory and
// configuration under a temporary directory, and cryo-runc as its OCI
// runtime. Podman starts the runtime with an almost empty environment, so
// cryo-runc's settings (the real runc, the fake driver) are in an
// environment file passed with --runtime-flag cryo-env=FILE.
type PodmanEnv struct {
	Dir     string
	EnvFile string
	Faults  string // CRYO_FAKE_CUDA_FAULTS
	Args    []string
	Env     []string
}

func NewPodman(t *testing.T, extraEnv ...string) *PodmanEnv {
	t.Helper()
	RequireRoot(t)
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("podman not found: run `make deps`")
	}
	dir, err := os.MkdirTemp("", "cryo-podman-")
	if err != nil {
		t.Fatal(err)
	}
	p := &PodmanEnv{Dir: dir, EnvFile: filepath.Join(dir, "cryo-runc.env"), Faults: filepath.Join(dir, "faults")}
	os.MkdirAll(p.Faults, 0o755)
	conf := filepath.Join(dir, "containers.conf")
	PodmanWriteFile(t, conf, `[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
`+conmonEnvVars())
	lines := append([]string{"CRYO_RUNC=/usr/sbin/runc"}, FakeDriverEnv(t, p.Faults)...)
	PodmanWriteFile(t, p.EnvFile, strings.Join(append(lines, extraEnv...), "\n")+"\n")
	p.Env = []string{"CONTAINERS_CONF=" + conf}
	p.Args = []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "runroot"),
		"--storage-driver", "vfs", "--runtime", CryoBin(t, "cryo-runc"), "--runtime-flag", "cryo-env=" + p.EnvFile,
		"--cgroup-manager", "cgroupfs", "--events-backend", "file"}
	t.Cleanup(func() { p.cleanup(t) })
	p.importImage(t)
	return p
}

// conmonEnvVars passes `make test`'s CRYO_TEST_RUN on to conmon, which
// Podman starts with an environment of its own: conmon is the parent of
// the container's processes, and through it contrib/leftovers.sh knows
// them as the test run's.
func conmonEnvVars() string {
	if run := os.Getenv("CRYO_TEST_RUN"); run != "" {
		return fmt.Sprintf("conmon_env_vars = [%q]\n", "CRYO_TEST_RUN="+run)
	}
	return ""
}

func PodmanWriteFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// podman runs podman with this environment's storage and runtime.
func (p *PodmanEnv) Podman(t *testing.T, args ...string) string {
	t.Helper()
	return Run(t, 2*time.Minute, p.Env, "podman", append(append([]string{}, p.Args...), args...)...)
}

func (p *PodmanEnv) PodmanErr(args ...string) (string, error) {
	return RunErr(2*time.Minute, p.Env, "podman", append(append([]string{}, p.Args...), args...)...)
}

// importImage turns NewRootfs into an image: `checkpoint --export` and
// `restore --import` need a real image, not --rootfs.
func (p *PodmanEnv) importImage(t *testing.T) {
	root := NewRootfs(t, p.Dir)
	tarball := filepath.Join(p.Dir, "rootfs.tar")
	Run(t, time.Minute, nil, "tar", "-C", root, "-cf", tarball, ".")
	p.Podman(t, "import", tarball, PodmanImage)
}

// cleanup removes every container, then unmounts and deletes the storage.
func (p *PodmanEnv) cleanup(t *testing.T) {
	p.PodmanErr("rm", "-a", "-f", "-t", "0")
	p.PodmanErr("rmi", "-a", "-f")
	podmanUnmountUnder(p.Dir)
	if err := os.RemoveAll(p.Dir); err != nil {
		t.Logf("cleanup %s: %v", p.Dir, err)
	}
}

// unmountUnder lazily unmounts whatever is still mounted below dir.
func podmanUnmountUnder(dir string) {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	lines := strings.Split(string(data), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if f := strings.Fields(lines[i]); len(f) > 4 && strings.HasPrefix(f[4], dir) {
			syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
}

// runApp starts fakecuda-app in a container given GPU 0 (PodmanStandIn),
// ticking every 100 ms, and waits for its third tick.
func (p *PodmanEnv) RunApp(t *testing.T, name string, shell ...string) {
	t.Helper()
	cmd := []string{"/bin/fakecuda-app", "100"}
	if len(shell) > 0 {
		cmd = append([]string{"/bin/sh", "-c"}, shell...)
	}
	args := append(append([]string{"run", "-d", "--name", name}, PodmanStandIn...), PodmanImage)
	p.Podman(t, append(args, cmd...)...)
	p.WaitTicks(t, name, 3)
}

// ticks returns the container's tick numbers, in log order, failing on a
// bad checksum.
func (p *PodmanEnv) Ticks(t *testing.T, name string) []int {
	t.Helper()
	out, _ := p.PodmanErr("logs", name)
	return FakeTicks(t, "container "+name, out)
}

func PodmanLastTick(ticks []int) int { return LastOf(ticks) }

// WaitTicks waits until the container's last tick reaches n.
func (p *PodmanEnv) WaitTicks(t *testing.T, name string, n int) {
	t.Helper()
	WaitFor(t, 20*time.Second, "container "+name+" to tick "+strconv.Itoa(n), func() bool { return PodmanLastTick(p.Ticks(t, name)) >= n })
}

// requireContinued checks that the ticks never went back (a restarted app
// would count from 0 again) and moved past from.
func (p *PodmanEnv) RequireContinued(t *testing.T, name string, from int) {
	t.Helper()
	p.WaitTicks(t, name, from+3)
	ticks := p.Ticks(t, name)
	for i := 1; i < len(ticks); i++ {
		if ticks[i] < ticks[i-1] {
			t.Fatalf("container %s: tick %d after tick %d: the app restarted instead of continuing", name, ticks[i], ticks[i-1])
		}
	}
}

func (p *PodmanEnv) State(t *testing.T, name string) string {
	out, err := p.PodmanErr("inspect", "--format", "{{.State.Status}}", name)
	if err != nil {
		return "gone"
	}
	return strings.TrimSpace(out)
}

// cudaStates asks `cryo cuda state` about the container's processes.
func (p *PodmanEnv) CUDAState(t *testing.T, name string) string {
	t.Helper()
	out, err := p.CUDAStateErr(name)
	if err != nil {
		t.Fatalf("cryo cuda state of %s: %v\n%s", name, err, out)
	}
	return out
}

func (p *PodmanEnv) CUDAStateErr(name string) (string, error) {
	pid, err := p.PodmanErr("inspect", "--format", "{{.State.Pid}}", name)
	if err != nil {
		return pid, err
	}
	envLines, _ := os.ReadFile(p.EnvFile)
	return RunErr(30*time.Second, strings.Fields(string(envLines)), filepath.Join(BinDir(), "cryo"), "cuda", "state", strings.TrimSpace(pid))
}

// PidsOf lists the processes running the program prog whose command line
// holds every word.
func PidsOf(prog string, words ...string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		args := strings.Split(string(b), "\x00")
		line := strings.Join(args, " ")
		all := filepath.Base(args[0]) == prog
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			pids = append(pids, pid)
		}
	}
	return pids
}
