package cli

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

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/cuda/fakecuda"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
)

func bareCounter(p *harness.BareProc) int {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "counter"))
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func bareStartCounter(t *testing.T) *harness.BareProc {
	p := harness.StartBare(t, nil, nil, `sh -c 'i=0; while :; do i=$((i+1)); echo $i > counter; sleep 0.05; done' </dev/null`)
	harness.WaitFor(t, 10*time.Second, "counter", func() bool { return bareCounter(p) >= 3 })
	return p
}

func TestBareCPUCheckpointRestore(t *testing.T) {
	harness.RequireRoot(t)
	p := bareStartCounter(t)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WaitFor(t, 10*time.Second, "the dumped process to exit", func() bool { return !p.Alive() })
	stopped := bareCounter(p)
	time.Sleep(300 * time.Millisecond)
	if c := bareCounter(p); c != stopped {
		t.Fatalf("counter moved from %d to %d after the dump", stopped, c)
	}
	m, err := manifest.Read(img)
	if err != nil || m.HasCUDA() || len(m.Digests) == 0 {
		t.Fatalf("manifest of a CPU checkpoint: %+v, %v", m, err)
	}
	if pid := harness.BareRestoredPID(t, nil, img); pid != p.PID {
		t.Fatalf("restored pid %d, want %d", pid, p.PID)
	}
	// It continues from its state: a restart would count from 1 again.
	harness.WaitFor(t, 10*time.Second, "the counter to continue", func() bool { return bareCounter(p) >= stopped+5 })
}

func TestBareCUDACheckpointRestore(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	out := harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	suspend, dump := strings.Index(out, "suspending CUDA done"), strings.Index(out, "dumping with CRIU")
	if suspend < 0 || dump < 0 || suspend > dump {
		t.Fatalf("CUDA must be suspended before the dump:\n%s", out)
	}
	harness.WaitFor(t, 10*time.Second, "the dumped process to exit", func() bool { return !p.Alive() })
	before := p.LastTick(t)
	m, err := manifest.Read(img)
	if err != nil || len(m.Processes) != 1 || m.Processes[0].PID != p.PID || len(m.Inventory.GPUs) == 0 {
		t.Fatalf("manifest: %+v, %v", m, err)
	}

	out = harness.Run(t, harness.BareTimeout, env, harness.CryoBin(t, "cryo"), "restore", "--dir", img)
	harness.WantIn(t, out, "verifying checkpoint done", "resuming CUDA done", strconv.Itoa(p.PID))
	p.WaitTicks(t, before+5)
	page, err := fakecuda.ReadPage(p.PID)
	if err != nil || page.State != 0 || page.Checkpoints < 1 || page.Restores < 1 || page.PairsCount < 1 {
		t.Fatalf("driver state after restore: %+v, %v", page, err)
	}
	harness.WantIn(t, harness.BareCryo(t, env, "cuda", "state", strconv.Itoa(p.PID)), "running")
	bareTicksIncrease(t, p.Output())
}

// bareTicksIncrease fails if the tick numbers ever go back: a restarted
// app would count from the start again.
func bareTicksIncrease(t *testing.T, out string) {
	t.Helper()
	prev := -1
	for _, m := range harness.FakeTickRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		if n <= prev || m[2] != "running" || m[3] != "OK" {
			t.Fatalf("tick %d after %d (%s): the app did not continue from its state:\n%s", n, prev, m[0], out)
		}
		prev = n
	}
}

func TestBareCUDALeaveRunning(t *testing.T) {
	harness.RequireRoot(t)
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, nil)
	img := filepath.Join(t.TempDir(), "img")
	out := harness.BareCryo(t, env, "checkpoint", "--leave-running", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WantIn(t, out, "suspending CUDA done", "resuming CUDA done")
	if !p.Alive() {
		t.Fatal("--leave-running: the process is gone")
	}
	p.WaitTicks(t, p.LastTick(t)+5)
	harness.WantIn(t, harness.BareCryo(t, env, "cuda", "state", strconv.Itoa(p.PID)), "running")
	m, err := manifest.Read(img)
	if err != nil || !m.HasCUDA() || digest.Verify(img, m.Digests) != nil {
		t.Fatalf("leave-running checkpoint: %+v, %v", m, err)
	}
}

// A connected unix socket whose peer lives outside the dumped tree (here in
// the test) is one CRIU refuses without --ext-unix-sk: a reliable dump
// failure. The process must run on with CUDA resumed.
func TestBareDumpFailureRollsBack(t *testing.T) {
	harness.RequireRoot(t)
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// CLOEXEC: only the end passed as fd 3 may reach the process; with both
	// ends inside the tree CRIU would dump the pair happily.
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	defer ours.Close()
	env := harness.FakeDriverEnv(t, "")
	p := harness.BareStartFakeApp(t, env, []*os.File{theirs})
	theirs.Close()

	img := filepath.Join(t.TempDir(), "img")
	out := harness.BareCryoFails(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WantIn(t, out, "checkpoint of pid "+strconv.Itoa(p.PID)+" failed at step dump", "External socket",
		filepath.Join(img, "criu-dump.log"), "left running with CUDA resumed", "remedy:", "rolling back: resuming CUDA done")
	if !p.Alive() {
		t.Fatal("the process died with the failed dump")
	}
	p.WaitTicks(t, p.LastTick(t)+5)
	harness.WantIn(t, harness.BareCryo(t, env, "cuda", "state", strconv.Itoa(p.PID)), "running")
}

// A driver failure during the suspend (injected through the fake) leaves
// the process running and nothing dumped.
func TestBareSuspendFailure(t *testing.T) {
	harness.RequireRoot(t)
	faults := t.TempDir()
	if err := os.WriteFile(filepath.Join(faults, "checkpoint"), []byte("error 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := harness.BareStartFakeApp(t, harness.FakeDriverEnv(t, ""), nil)
	img := filepath.Join(t.TempDir(), "img")
	out := harness.BareCryoFails(t, harness.FakeDriverEnv(t, faults), "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WantIn(t, out, "failed at step suspend", "left running", "remedy:")
	if _, err := os.Stat(filepath.Join(img, "inventory.img")); err == nil {
		t.Fatal("CRIU dumped although the suspend failed")
	}
	p.WaitTicks(t, p.LastTick(t)+5)
}

func TestBareRefusals(t *testing.T) {
	harness.RequireRoot(t)
	t.Run("not a checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o644)
		out := harness.BareCryoFails(t, nil, "restore", "--dir", dir)
		harness.WantIn(t, out, "restore of checkpoint "+dir+" failed at step verify", "holds no CRIU images", "not a checkpoint", "remedy: pass the directory")
	})
	t.Run("dead pid", func(t *testing.T) {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pid := strconv.Itoa(cmd.Process.Pid)
		out := harness.BareCryoFails(t, nil, "checkpoint", "--pid", pid, "--dir", filepath.Join(t.TempDir(), "img"))
		harness.WantIn(t, out, "process "+pid+" does not exist", "nothing was checkpointed")
	})
	t.Run("flipped byte", func(t *testing.T) {
		p := bareStartCounter(t)
		img := filepath.Join(t.TempDir(), "img")
		harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
		pages, _ := filepath.Glob(filepath.Join(img, "pages-*.img"))
		if len(pages) == 0 {
			t.Fatal("no pages image")
		}
		harness.FlipByte(t, pages[0])
		out := harness.BareCryoFails(t, nil, "restore", "--dir", img)
		harness.WantIn(t, out, "checkpoint image file "+filepath.Base(pages[0])+" is corrupt: sha256 mismatch", "remedy: re-take or re-transfer the checkpoint")
		bareNotRestored(t, p, img)
	})
	t.Run("GPU this host lacks", func(t *testing.T) {
		env := harness.FakeDriverEnv(t, "")
		p := harness.BareStartFakeApp(t, env, nil)
		img := filepath.Join(t.TempDir(), "img")
		harness.BareCryo(t, env, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
		bareDemandB200(t, img)
		out := harness.BareCryoFails(t, env, "restore", "--dir", img)
		harness.WantIn(t, out, "restore needs 1× NVIDIA B200 (sm_100) with ≥ 9.2 GiB free; this host offers", "H100", "nothing was restored")
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
func bareNotRestored(t *testing.T, p *harness.BareProc, img string) {
	t.Helper()
	if p.Alive() {
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
	harness.RequireRoot(t)
	p := bareStartCounter(t)
	img := filepath.Join(t.TempDir(), "img")
	if err := os.Mkdir(img, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(img, 0o755)
	harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img, "--leave-running")
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
	out := harness.BareCryoFails(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", full)
	harness.WantIn(t, out, "image directory is not empty", "nothing was checkpointed", "remedy: give --dir a new or empty directory")
	if !p.Alive() {
		t.Fatal("the refused checkpoint touched the process")
	}
}
