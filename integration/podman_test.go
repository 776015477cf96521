package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
)

// podmanImage is the image every Podman test runs: newRootfs, imported.
const podmanImage = "localhost/cryo-fakecuda:latest"

// podmanEnv is a Podman with its own storage, run directory and
// configuration under a temporary directory, and cryo-runc as its OCI
// runtime. Podman starts the runtime with an almost empty environment, so
// cryo-runc's settings (the real runc, the fake driver) are in an
// environment file passed with --runtime-flag cryo-env=FILE.
type podmanEnv struct {
	dir     string
	envFile string
	faults  string // CRYO_FAKE_CUDA_FAULTS
	args    []string
	env     []string
}

func newPodman(t *testing.T, extraEnv ...string) *podmanEnv {
	t.Helper()
	requireRoot(t)
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("podman not found: run `make deps`")
	}
	dir, err := os.MkdirTemp("", "cryo-podman-")
	if err != nil {
		t.Fatal(err)
	}
	p := &podmanEnv{dir: dir, envFile: filepath.Join(dir, "cryo-runc.env"), faults: filepath.Join(dir, "faults")}
	os.MkdirAll(p.faults, 0o755)
	conf := filepath.Join(dir, "containers.conf")
	podmanWriteFile(t, conf, `[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "none"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
`+conmonEnvVars())
	lines := append([]string{"CRYO_RUNC=/usr/sbin/runc"}, fakeDriverEnv(t, p.faults)...)
	podmanWriteFile(t, p.envFile, strings.Join(append(lines, extraEnv...), "\n")+"\n")
	p.env = []string{"CONTAINERS_CONF=" + conf}
	p.args = []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "runroot"),
		"--storage-driver", "vfs", "--runtime", cryoBin(t, "cryo-runc"), "--runtime-flag", "cryo-env=" + p.envFile,
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

func podmanWriteFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// podman runs podman with this environment's storage and runtime.
func (p *podmanEnv) podman(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, 2*time.Minute, p.env, "podman", append(append([]string{}, p.args...), args...)...)
}

func (p *podmanEnv) podmanErr(args ...string) (string, error) {
	return runErr(2*time.Minute, p.env, "podman", append(append([]string{}, p.args...), args...)...)
}

// importImage turns newRootfs into an image: `checkpoint --export` and
// `restore --import` need a real image, not --rootfs.
func (p *podmanEnv) importImage(t *testing.T) {
	root := newRootfs(t, p.dir)
	tarball := filepath.Join(p.dir, "rootfs.tar")
	run(t, time.Minute, nil, "tar", "-C", root, "-cf", tarball, ".")
	p.podman(t, "import", tarball, podmanImage)
}

// cleanup removes every container, then unmounts and deletes the storage.
func (p *podmanEnv) cleanup(t *testing.T) {
	p.podmanErr("rm", "-a", "-f", "-t", "0")
	p.podmanErr("rmi", "-a", "-f")
	podmanUnmountUnder(p.dir)
	if err := os.RemoveAll(p.dir); err != nil {
		t.Logf("cleanup %s: %v", p.dir, err)
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

// runApp starts fakecuda-app in a container given GPU 0 (podmanStandIn),
// ticking every 100 ms, and waits for its third tick.
func (p *podmanEnv) runApp(t *testing.T, name string, shell ...string) {
	t.Helper()
	cmd := []string{"/bin/fakecuda-app", "100"}
	if len(shell) > 0 {
		cmd = append([]string{"/bin/sh", "-c"}, shell...)
	}
	args := append(append([]string{"run", "-d", "--name", name}, podmanStandIn...), podmanImage)
	p.podman(t, append(args, cmd...)...)
	p.waitTicks(t, name, 3)
}

// ticks returns the container's tick numbers, in log order, failing on a
// bad checksum.
func (p *podmanEnv) ticks(t *testing.T, name string) []int {
	t.Helper()
	out, _ := p.podmanErr("logs", name)
	return fakeTicks(t, "container "+name, out)
}

func podmanLastTick(ticks []int) int { return lastOf(ticks) }

// waitTicks waits until the container's last tick reaches n.
func (p *podmanEnv) waitTicks(t *testing.T, name string, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, "container "+name+" to tick "+strconv.Itoa(n), func() bool { return podmanLastTick(p.ticks(t, name)) >= n })
}

// requireContinued checks that the ticks never went back (a restarted app
// would count from 0 again) and moved past from.
func (p *podmanEnv) requireContinued(t *testing.T, name string, from int) {
	t.Helper()
	p.waitTicks(t, name, from+3)
	ticks := p.ticks(t, name)
	for i := 1; i < len(ticks); i++ {
		if ticks[i] < ticks[i-1] {
			t.Fatalf("container %s: tick %d after tick %d: the app restarted instead of continuing", name, ticks[i], ticks[i-1])
		}
	}
}

func (p *podmanEnv) state(t *testing.T, name string) string {
	out, err := p.podmanErr("inspect", "--format", "{{.State.Status}}", name)
	if err != nil {
		return "gone"
	}
	return strings.TrimSpace(out)
}

// cudaStates asks `cryo cuda state` about the container's processes.
func (p *podmanEnv) cudaState(t *testing.T, name string) string {
	t.Helper()
	out, err := p.cudaStateErr(name)
	if err != nil {
		t.Fatalf("cryo cuda state of %s: %v\n%s", name, err, out)
	}
	return out
}

func (p *podmanEnv) cudaStateErr(name string) (string, error) {
	pid, err := p.podmanErr("inspect", "--format", "{{.State.Pid}}", name)
	if err != nil {
		return pid, err
	}
	envLines, _ := os.ReadFile(p.envFile)
	return runErr(30*time.Second, strings.Fields(string(envLines)), filepath.Join(binDir(), "cryo"), "cuda", "state", strings.TrimSpace(pid))
}

// manifestOf reads cryo-manifest.json from an exported checkpoint.
func exportedManifest(t *testing.T, export string) *manifest.Manifest {
	t.Helper()
	out := run(t, time.Minute, nil, "tar", "--zstd", "-xOf", export, "checkpoint/"+manifest.ManifestName)
	var m manifest.Manifest
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("manifest in %s: %v\n%s", export, err, out)
	}
	return &m
}

// The main path: export a checkpoint, remove the container, import it; the
// app continues where it was, and the export carries the GPU manifest.
// runc dumps and restores with the CRIU that CRYO_CRIU names, which is not
// on PATH at all.
func TestPodmanExportImport(t *testing.T) {
	criu := newLoggingCRIU(t)
	p := newPodman(t, "CRYO_CRIU="+criu.path)
	p.runApp(t, "app")
	export := filepath.Join(p.dir, "app.tar.zst")
	out := p.podman(t, "container", "checkpoint", "--export", export, "app")
	before := podmanLastTick(p.ticks(t, "app"))
	m := exportedManifest(t, export)
	if len(m.Processes) != 1 || m.Digests == nil || len(m.Needs) == 0 {
		t.Fatalf("manifest in the export: %+v\n%s", m, out)
	}
	if !stepTakenBefore(m, "suspend", "dump") {
		t.Fatalf("CUDA was not suspended before the dump: steps %+v", m.Steps)
	}
	dumps := criu.runcSwrks()
	if dumps == 0 {
		t.Fatalf("runc did not dump with CRYO_CRIU=%s", criu.path)
	}
	p.podman(t, "rm", "-f", "app")
	p.podman(t, "container", "restore", "--import", export)
	if criu.runcSwrks() == dumps {
		t.Fatalf("runc did not restore with CRYO_CRIU=%s", criu.path)
	}
	if st := p.state(t, "app"); st != "running" {
		t.Fatalf("restored container is %s", st)
	}
	p.requireContinued(t, "app", before)
	if st := p.cudaState(t, "app"); !strings.Contains(st, "running") {
		t.Fatalf("CUDA not resumed after the restore: %s", st)
	}
}

// stepBefore reports whether step a was taken, and before step b.
func stepTakenBefore(m *manifest.Manifest, a, b string) bool {
	ia, ib := -1, -1
	for i, s := range m.Steps {
		if s.Name == a && s.Error == "" {
			ia = i
		}
		if s.Name == b {
			ib = i
		}
	}
	return ia >= 0 && ib > ia
}

// --leave-running keeps the container running with CUDA resumed; a later
// restore in place continues from the checkpoint.
func TestPodmanLeaveRunning(t *testing.T) {
	p := newPodman(t)
	p.runApp(t, "app")
	p.podman(t, "container", "checkpoint", "--leave-running", "app")
	if st := p.state(t, "app"); st != "running" {
		t.Fatalf("container is %s after checkpoint --leave-running", st)
	}
	p.requireContinued(t, "app", podmanLastTick(p.ticks(t, "app")))
	if st := p.cudaState(t, "app"); !strings.Contains(st, "running") {
		t.Fatalf("CUDA not resumed after checkpoint --leave-running: %s", st)
	}
}

// A dump that CRIU refuses (a deleted open file larger than CRIU's ghost
// limit) leaves the container running with CUDA resumed.
func TestPodmanCRIUFailureResumes(t *testing.T) {
	p := newPodman(t)
	p.runApp(t, "app", "busybox dd if=/dev/zero of=/tmp/big bs=1M count=2 2>/dev/null; exec 3</tmp/big; rm /tmp/big; exec /bin/fakecuda-app 100")
	out, err := p.podmanErr("container", "checkpoint", "app")
	if err == nil {
		t.Fatalf("checkpoint succeeded despite the oversized ghost file:\n%s", out)
	}
	for _, want := range []string{"failed at step dump", "CUDA"} {
		if !strings.Contains(out, want) {
			t.Errorf("error lacks %q:\n%s", want, out)
		}
	}
	if st := p.state(t, "app"); st != "running" {
		t.Fatalf("container is %s after a failed checkpoint", st)
	}
	p.requireContinued(t, "app", podmanLastTick(p.ticks(t, "app")))
}

// A driver fault while suspending aborts the checkpoint before CRIU runs,
// and the container keeps running.
func TestPodmanDriverFaultResumes(t *testing.T) {
	p := newPodman(t)
	p.runApp(t, "app")
	podmanWriteFile(t, filepath.Join(p.faults, "checkpoint"), "error 2\n")
	out, err := p.podmanErr("container", "checkpoint", "app")
	os.Remove(filepath.Join(p.faults, "checkpoint"))
	if err == nil {
		t.Fatalf("checkpoint succeeded despite the driver fault:\n%s", out)
	}
	if !strings.Contains(out, "step suspend") {
		t.Errorf("error does not name the suspend step:\n%s", out)
	}
	if st := p.state(t, "app"); st != "running" {
		t.Fatalf("container is %s after a failed checkpoint", st)
	}
	p.requireContinued(t, "app", podmanLastTick(p.ticks(t, "app")))
}

// A flipped byte in an exported image fails the import before anything is
// restored.
func TestPodmanImportRefusesCorruptImage(t *testing.T) {
	p := newPodman(t)
	p.runApp(t, "app")
	export := filepath.Join(p.dir, "app.tar.zst")
	p.podman(t, "container", "checkpoint", "--export", export, "app")
	p.podman(t, "rm", "-f", "app")
	unpacked := filepath.Join(p.dir, "unpacked")
	os.MkdirAll(unpacked, 0o755)
	run(t, time.Minute, nil, "tar", "--zstd", "-C", unpacked, "-xf", export)
	pages, _ := filepath.Glob(filepath.Join(unpacked, "checkpoint", "pages-*.img"))
	if len(pages) == 0 {
		t.Fatal("no pages image in the export")
	}
	flipByte(t, pages[0])
	corrupt := filepath.Join(p.dir, "corrupt.tar.zst")
	run(t, time.Minute, nil, "tar", "--zstd", "-C", unpacked, "-cf", corrupt, ".")
	out, err := p.podmanErr("container", "restore", "--import", corrupt)
	if err == nil {
		t.Fatalf("restore of a corrupt checkpoint succeeded:\n%s", out)
	}
	if !strings.Contains(out, filepath.Base(pages[0])) || !strings.Contains(out, "corrupt") {
		t.Errorf("error does not name the corrupt file:\n%s", out)
	}
	if st := p.state(t, "app"); st == "running" {
		t.Fatalf("container runs after a refused restore")
	}
}

// With CRYO_CRIU_HOOKS=1, cryo-runc gives each container a CRIU action
// script, so that a direct `runc checkpoint --leave-running`, bypassing
// cryo-runc, still suspends CUDA before the dump, writes the manifest, and
// resumes CUDA afterwards.
func TestPodmanHooksDirectRuncCheckpoint(t *testing.T) {
	p := newPodman(t, "CRYO_CRIU_HOOKS=1")
	p.runApp(t, "app")
	id := strings.TrimSpace(p.podman(t, "inspect", "--format", "{{.Id}}", "app"))
	img := filepath.Join(p.dir, "direct")
	// Podman gives runc no --root, so runc's default state directory holds it.
	out := run(t, time.Minute, nil, "/usr/sbin/runc", "checkpoint", "--leave-running", "--image-path", img, "--work-path", filepath.Join(p.dir, "direct-work"), id)
	m, err := manifest.Read(img)
	if err != nil {
		t.Fatalf("direct runc checkpoint wrote no manifest: %v\n%s", err, out)
	}
	if len(m.Processes) != 1 || m.Processes[0].State != "running" || m.Digests == nil {
		t.Fatalf("manifest of the direct checkpoint: %+v", m)
	}
	if err := digest.Verify(img, m.Digests); err != nil {
		t.Fatalf("digests of the direct checkpoint: %v", err)
	}
	// The resume happens in a watcher once CRIU has exited.
	// A query may meet the watcher's hold (another tracer): asked again.
	waitFor(t, 20*time.Second, "CUDA resumed after the direct checkpoint", func() bool {
		st, err := p.cudaStateErr("app")
		return err == nil && strings.Contains(st, "running") && !strings.Contains(st, "stopped")
	})
	p.requireContinued(t, "app", podmanLastTick(p.ticks(t, "app")))
}

// TestPodmanKilledCryoRunc: cryo-runc SIGKILLed during Podman's checkpoint,
// after CRIU's dump (which ends the container's processes) and before the
// digests. The workload is not lost: `podman container restore` brings it
// back from the dump, which the restore completes, and it carries on with
// its device memory intact.
func TestPodmanKilledCryoRunc(t *testing.T) {
	hold := filepath.Join(t.TempDir(), "hold")
	p := newPodman(t, "CRYO_TEST_HOLD=digests:"+hold, "CRYO_DIGEST_WATCH=0")
	p.withRuntime(failpointBin(t, "cryo-runc")) // the hold is compiled only there
	p.runApp(t, "app")
	before := podmanLastTick(p.ticks(t, "app"))
	ckpt := exec.Command("podman", append(append([]string{}, p.args...), "container", "checkpoint", "app")...)
	ckpt.Env = append(os.Environ(), p.env...)
	out := &strings.Builder{}
	ckpt.Stdout, ckpt.Stderr = out, out
	if err := ckpt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ckpt.Process.Kill(); ckpt.Wait() })
	waitFor(t, 2*time.Minute, "cryo-runc to finish the dump", func() bool {
		_, err := os.Stat(hold)
		return err == nil
	})
	killed := 0
	for _, pid := range pidsOf("cryo-runc", "checkpoint") { // cryo-runc, not podman
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatal("no cryo-runc checkpoint process to kill")
	}
	if err := ckpt.Wait(); err == nil {
		t.Fatalf("podman's checkpoint succeeded although cryo-runc was killed:\n%s", out)
	}
	t.Logf("podman after the kill: %s", strings.TrimSpace(out.String()))
	// The dump ended the container's processes; conmon tells Podman so a
	// moment later, and only then does Podman accept a restore.
	waitFor(t, 30*time.Second, "Podman to see the dumped container exit", func() bool { return p.state(t, "app") != "running" })
	restored, err := p.podmanErr("container", "restore", "app")
	if err != nil {
		t.Fatalf("restore after the killed checkpoint: %v\n%s", err, restored)
	}
	if st := p.state(t, "app"); st != "running" {
		t.Fatalf("container is %s after the restore", st)
	}
	p.requireContinued(t, "app", before)
	if st := p.cudaState(t, "app"); !strings.Contains(st, "running") {
		t.Fatalf("CUDA after the restore: %s", st)
	}
}

// pidsOf lists the processes running the program prog whose command line
// holds every word.
func pidsOf(prog string, words ...string) []int {
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
