package integration

// Bare-process checkpoint and restore (`cryo checkpoint --pid`, `cryo
// restore --dir`) with the real CRIU, on a CPU process and on fakecuda-app
// under the fake CUDA driver.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

const bareTimeout = 2 * time.Minute

// bareProc is a process tree started detached (setsid -f, so init reaps it
// and its pid is free again after a dump), stdio on /dev/null and a file:
// CRIU restores both as they were.
type bareProc struct {
	dir string // owned by the process: its pid file and output
	pid int
}

// startBare runs script with sh in its own session. extra files are passed
// as fds 3, 4, …; env is added to the environment.
func startBare(t *testing.T, env []string, extra []*os.File, script string) *bareProc {
	t.Helper()
	p := &bareProc{dir: t.TempDir()}
	out, err := os.Create(filepath.Join(p.dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("setsid", "-f", "sh", "-c", "echo $$ > pid; exec "+script)
	cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = p.dir, out, out, extra
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	waitFor(t, 10*time.Second, "pid file", func() bool {
		b, err := os.ReadFile(filepath.Join(p.dir, "pid"))
		p.pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && p.pid > 0
	})
	// Registered after TempDir, so it runs first: the restored process
	// keeps the same pid, so killing it by pid covers the restored one too.
	// setsid made it the leader of its own process group, which CRIU
	// restores too: the group goes with it (a pipeline's other processes,
	// `cat /dev/zero | tail`, would spin on otherwise).
	t.Cleanup(func() { syscall.Kill(-p.pid, syscall.SIGKILL); syscall.Kill(p.pid, syscall.SIGKILL) })
	return p
}

func (p *bareProc) alive() bool { return procfs.Alive(p.pid) }

func (p *bareProc) output() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "out"))
	return string(b)
}

// lastTick is the number of the last tick fakecuda-app printed, or -1.
func (p *bareProc) lastTick(t *testing.T) int {
	t.Helper()
	return lastOf(fakeTicks(t, "fakecuda-app", p.output()))
}

// waitTicks waits until the app has printed tick n or later.
func (p *bareProc) waitTicks(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, "tick "+strconv.Itoa(n), func() bool { return p.lastTick(t) >= n })
}

func bareStartFakeApp(t *testing.T, env []string, extra []*os.File) *bareProc {
	libDir := filepath.Dir(fakeFile(t, "libcuda.so.1"))
	app := fakeFile(t, "fakecuda-app")
	p := startBare(t, append(env, "LD_LIBRARY_PATH="+libDir), extra, app+" 50")
	p.waitTicks(t, 3)
	return p
}

func bareCryo(t *testing.T, env []string, args ...string) string {
	t.Helper()
	return run(t, bareTimeout, env, cryoBin(t, "cryo"), args...)
}

func bareCryoFails(t *testing.T, env []string, args ...string) string {
	t.Helper()
	return cryoFails(t, bareTimeout, env, args...)
}

func bareCounter(p *bareProc) int {
	b, _ := os.ReadFile(filepath.Join(p.dir, "counter"))
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func bareStartCounter(t *testing.T) *bareProc {
	p := startBare(t, nil, nil, `sh -c 'i=0; while :; do i=$((i+1)); echo $i > counter; sleep 0.05; done' </dev/null`)
	waitFor(t, 10*time.Second, "counter", func() bool { return bareCounter(p) >= 3 })
	return p
}

// bareRestoredPID runs `cryo restore` and returns the pid it prints.
func bareRestoredPID(t *testing.T, env []string, img string) int {
	t.Helper()
	out := run(t, bareTimeout, env, cryoBin(t, "cryo"), "restore", "--dir", img)
	for _, line := range strings.Split(out, "\n") {
		if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil {
			return n
		}
	}
	t.Fatalf("cryo restore printed no pid:\n%s", out)
	return 0
}

func TestBareCPUCheckpointRestore(t *testing.T) {
	requireRoot(t)
	p := bareStartCounter(t)
	img := filepath.Join(t.TempDir(), "img")
	bareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	waitFor(t, 10*time.Second, "the dumped process to exit", func() bool { return !p.alive() })
	stopped := bareCounter(p)
	time.Sleep(300 * time.Millisecond)
	if c := bareCounter(p); c != stopped {
		t.Fatalf("counter moved from %d to %d after the dump", stopped, c)
	}
	m, err := manifest.Read(img)
	if err != nil || m.HasCUDA() || len(m.Digests) == 0 {
		t.Fatalf("manifest of a CPU checkpoint: %+v, %v", m, err)
	}
	if pid := bareRestoredPID(t, nil, img); pid != p.pid {
		t.Fatalf("restored pid %d, want %d", pid, p.pid)
	}
	// It continues from its state: a restart would count from 1 again.
	waitFor(t, 10*time.Second, "the counter to continue", func() bool { return bareCounter(p) >= stopped+5 })
}

func TestBareCUDACheckpointRestore(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	out := bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	suspend, dump := strings.Index(out, "suspending CUDA done"), strings.Index(out, "dumping with CRIU")
	if suspend < 0 || dump < 0 || suspend > dump {
		t.Fatalf("CUDA must be suspended before the dump:\n%s", out)
	}
	waitFor(t, 10*time.Second, "the dumped process to exit", func() bool { return !p.alive() })
	before := p.lastTick(t)
	m, err := manifest.Read(img)
	if err != nil || len(m.Processes) != 1 || m.Processes[0].PID != p.pid || len(m.Inventory.GPUs) == 0 {
		t.Fatalf("manifest: %+v, %v", m, err)
	}

	out = run(t, bareTimeout, env, cryoBin(t, "cryo"), "restore", "--dir", img)
	wantIn(t, out, "verifying checkpoint done", "resuming CUDA done", strconv.Itoa(p.pid))
	p.waitTicks(t, before+5)
	page, err := fakecuda.ReadPage(p.pid)
	if err != nil || page.State != 0 || page.Checkpoints < 1 || page.Restores < 1 || page.PairsCount < 1 {
		t.Fatalf("driver state after restore: %+v, %v", page, err)
	}
	wantIn(t, bareCryo(t, env, "cuda", "state", strconv.Itoa(p.pid)), "running")
	bareTicksIncrease(t, p.output())
}

// bareTicksIncrease fails if the tick numbers ever go back: a restarted
// app would count from the start again.
func bareTicksIncrease(t *testing.T, out string) {
	t.Helper()
	prev := -1
	for _, m := range fakeTickRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		if n <= prev || m[2] != "running" || m[3] != "OK" {
			t.Fatalf("tick %d after %d (%s): the app did not continue from its state:\n%s", n, prev, m[0], out)
		}
		prev = n
	}
}

func TestBareCUDALeaveRunning(t *testing.T) {
	requireRoot(t)
	env := fakeDriverEnv(t, "")
	p := bareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	out := bareCryo(t, env, "checkpoint", "--leave-running", "--pid", strconv.Itoa(p.pid), "--dir", img)
	wantIn(t, out, "suspending CUDA done", "resuming CUDA done")
	if !p.alive() {
		t.Fatal("--leave-running: the process is gone")
	}
	p.waitTicks(t, p.lastTick(t)+5)
	wantIn(t, bareCryo(t, env, "cuda", "state", strconv.Itoa(p.pid)), "running")
	m, err := manifest.Read(img)
	if err != nil || !m.HasCUDA() || digest.Verify(img, m.Digests) != nil {
		t.Fatalf("leave-running checkpoint: %+v, %v", m, err)
	}
}

// A connected unix socket whose peer lives outside the dumped tree (here in
// the test) is one CRIU refuses without --ext-unix-sk: a reliable dump
// failure. The process must run on with CUDA resumed.
func TestBareDumpFailureRollsBack(t *testing.T) {
	requireRoot(t)
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// CLOEXEC: only the end passed as fd 3 may reach the process; with both
	// ends inside the tree CRIU would dump the pair happily.
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	defer ours.Close()
	env := fakeDriverEnv(t, "")
	p := bareStartFakeApp(t, env, []*os.File{theirs})
	theirs.Close()

	img := filepath.Join(t.TempDir(), "img")
	out := bareCryoFails(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	wantIn(t, out, "checkpoint of pid "+strconv.Itoa(p.pid)+" failed at step dump", "External socket",
		filepath.Join(img, "criu-dump.log"), "left running with CUDA resumed", "remedy:", "rolling back: resuming CUDA done")
	if !p.alive() {
		t.Fatal("the process died with the failed dump")
	}
	p.waitTicks(t, p.lastTick(t)+5)
	wantIn(t, bareCryo(t, env, "cuda", "state", strconv.Itoa(p.pid)), "running")
}

// A driver failure during the suspend (injected through the fake) leaves
// the process running and nothing dumped.
func TestBareSuspendFailure(t *testing.T) {
	requireRoot(t)
	faults := t.TempDir()
	if err := os.WriteFile(filepath.Join(faults, "checkpoint"), []byte("error 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := bareStartFakeApp(t, fakeDriverEnv(t, ""), nil)
	img := filepath.Join(t.TempDir(), "img")
	out := bareCryoFails(t, fakeDriverEnv(t, faults), "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
	wantIn(t, out, "failed at step suspend", "left running", "remedy:")
	if _, err := os.Stat(filepath.Join(img, "inventory.img")); err == nil {
		t.Fatal("CRIU dumped although the suspend failed")
	}
	p.waitTicks(t, p.lastTick(t)+5)
}

func TestBareRefusals(t *testing.T) {
	requireRoot(t)
	t.Run("not a checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o644)
		out := bareCryoFails(t, nil, "restore", "--dir", dir)
		wantIn(t, out, "restore of checkpoint "+dir+" failed at step verify", "holds no CRIU images", "not a checkpoint", "remedy: pass the directory")
	})
	t.Run("dead pid", func(t *testing.T) {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pid := strconv.Itoa(cmd.Process.Pid)
		out := bareCryoFails(t, nil, "checkpoint", "--pid", pid, "--dir", filepath.Join(t.TempDir(), "img"))
		wantIn(t, out, "process "+pid+" does not exist", "nothing was checkpointed")
	})
	t.Run("flipped byte", func(t *testing.T) {
		p := bareStartCounter(t)
		img := filepath.Join(t.TempDir(), "img")
		bareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
		pages, _ := filepath.Glob(filepath.Join(img, "pages-*.img"))
		if len(pages) == 0 {
			t.Fatal("no pages image")
		}
		flipByte(t, pages[0])
		out := bareCryoFails(t, nil, "restore", "--dir", img)
		wantIn(t, out, "checkpoint image file "+filepath.Base(pages[0])+" is corrupt: sha256 mismatch", "remedy: re-take or re-transfer the checkpoint")
		bareNotRestored(t, p, img)
	})
	t.Run("GPU this host lacks", func(t *testing.T) {
		env := fakeDriverEnv(t, "")
		p := bareStartFakeApp(t, env, nil)
		img := filepath.Join(t.TempDir(), "img")
		bareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img)
		bareDemandB200(t, img)
		out := bareCryoFails(t, env, "restore", "--dir", img)
		wantIn(t, out, "restore needs 1× NVIDIA B200 (sm_100) with ≥ 9.2 GiB free; this host offers", "H100", "nothing was restored")
		bareNotRestored(t, p, img)
	})
}

// bareDemandB200 edits the manifest so that the checkpoint needs a GPU model the
// fake host lacks.
func bareDemandB200(t *testing.T, img string) {
	t.Helper()
	path := filepath.Join(img, manifest.ManifestName)
	var m map[string]any
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["needs"] = []map[string]any{{"uuid": "GPU-b200", "name": "NVIDIA B200", "compute_capability": "10.0", "memory": 92 * (1 << 30) / 10}}
	// The per-process record (manifest format 3) is what a restore matches.
	for _, p := range m["processes"].([]any) {
		p.(map[string]any)["gpus"] = []map[string]any{{"uuid": "GPU-b200", "name": "NVIDIA B200", "compute_capability": "10.0", "memory": 92 * (1 << 30) / 10}}
	}
	b, _ = json.Marshal(m)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// bareNotRestored checks that the refusal came before CRIU ran: no
// process, and no restore log in the image directory.
func bareNotRestored(t *testing.T, p *bareProc, img string) {
	t.Helper()
	if p.alive() {
		t.Fatal("the refused checkpoint was restored")
	}
	if _, err := os.Stat(filepath.Join(img, "criu-restore.log")); err == nil {
		t.Fatal("CRIU ran although the checkpoint was refused")
	}
}

// TestBarePrivateImageDir: a checkpoint into an existing 0755 directory
// leaves it 0700 and every file in it 0600 (CRIU writes with its umask);
// a non-empty directory is refused before the process is touched.
func TestBarePrivateImageDir(t *testing.T) {
	requireRoot(t)
	p := bareStartCounter(t)
	img := filepath.Join(t.TempDir(), "img")
	if err := os.Mkdir(img, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(img, 0o755)
	bareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", img, "--leave-running")
	n := 0
	filepath.WalkDir(img, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		info, _ := d.Info()
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, info.Mode().Perm(), want)
		}
		n++
		return nil
	})
	if n < 3 {
		t.Fatalf("only %d entries in the checkpoint", n)
	}

	full := t.TempDir()
	os.Mkdir(filepath.Join(full, ".ssh"), 0o700)
	os.WriteFile(filepath.Join(full, ".ssh", "id_rsa"), []byte("secret"), 0o600)
	out := bareCryoFails(t, nil, "checkpoint", "--pid", strconv.Itoa(p.pid), "--dir", full)
	wantIn(t, out, "image directory is not empty", "nothing was checkpointed", "remedy: give --dir a new or empty directory")
	if !p.alive() {
		t.Fatal("the refused checkpoint touched the process")
	}
}
