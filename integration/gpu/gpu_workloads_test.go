package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// The GPU workload tests (contrib/workloads, docs/gpu-workloads.md): a
// PyTorch training loop whose losses must equal an uninterrupted run's bit
// for bit, a PyTorch inference server timed against its cold start, a
// container with several CUDA processes, 20 back-to-back cycles of the CUDA
// workload with leak checks, and rollback on a failure injected into CRIU.
// Each one also checks the check: a byte corrupted on purpose is noticed.

// TestGPUWorkloadTrain: workload (b) through cryo-runc and the shim. A reference run
// without interruption, then the same training in a container, checkpointed
// and restored mid-way: every loss must be the same, bit for bit.
func TestGPUWorkloadTrain(t *testing.T) {
	py := torchPython(t)
	script := filepath.Join(workloadsDir(t), "torchtrain/train.py")
	const upto = 40
	start := time.Now()
	refOut := harness.Run(t, 4*time.Minute, []string{"CUBLAS_WORKSPACE_CONFIG=:4096:8"}, py.exe, script, "--steps", "60", "--interval-ms", "0")
	ref := trainSteps(t, refOut)
	t.Logf("reference run: %d steps in %.1fs", len(ref), time.Since(start).Seconds())
	if len(ref) != 60 {
		t.Fatalf("reference run printed %d steps, want 60:\n%s", len(ref), harness.Tail(refOut, 20))
	}

	for _, f := range gpuFlavors() {
		t.Run(f.name, func(t *testing.T) {
			c := pyContainer(t, harness.CryoBin(t, "cryo-runc"), "cryo-gpu-train", py, map[string]string{"/app/train.py": script}, nil,
				py.exe, "/app/train.py", "--steps", "0", "--interval-ms", "100")
			trainAcrossRestore(t, f.name, f.start(t, c), ref, upto)
		})
	}
}

// trainAcrossRestore checkpoints the running training, restores it, and
// compares its losses with the reference run's; then checks the check.
func trainAcrossRestore(t *testing.T, flavor string, c gpuTask, ref map[int]string, upto int) {
	waitSteps(t, c, 8, "training steps")
	report(t, "train ("+flavor+"): checkpoint", c.Checkpoint())
	at := lastStep(trainSteps(t, c.Output()))
	t0 := time.Now()
	report(t, "train ("+flavor+"): restore", c.Restore())
	waitSteps(t, c, at, "a training step after the restore")
	report(t, "train ("+flavor+"): restore to next step", time.Since(t0))
	waitSteps(t, c, upto, "training steps after the restore")
	got := trainSteps(t, c.Output())
	if err := compareLosses(got, ref, upto); err != nil {
		t.Fatalf("the restored training departs from the uninterrupted run (checkpoint after step %d): %v", at, err)
	}
	t.Logf("steps 1..%d equal the uninterrupted run bit for bit (checkpoint after step %d)", upto, at)

	// Check the check: a flipped byte in the weights must show in the losses.
	c.signal("USR1")
	harness.WaitFor(t, 30*time.Second, "the workload to corrupt its weights", func() bool {
		return strings.Contains(c.Output(), "corrupted one byte")
	})
	bad := lastStep(trainSteps(t, c.Output()))
	if bad+3 > 60 {
		t.Fatalf("too late to compare with the reference (step %d)", bad)
	}
	waitSteps(t, c, bad+3, "steps after the corruption")
	if err := compareLosses(trainSteps(t, c.Output()), ref, bad+3); err == nil {
		t.Fatalf("a corrupted weight went unnoticed: the losses still equal the reference")
	} else {
		t.Logf("check of the check: corruption noticed (%v)", err)
	}
}

func waitSteps(t *testing.T, c gpuTask, after int, what string) {
	t.Helper()
	harness.WaitFor(t, 3*time.Minute, what, func() bool {
		out := c.Output()
		if strings.Contains(out, "Traceback") {
			t.Fatalf("torchtrain failed:\n%s", harness.Tail(out, 30))
		}
		return lastStep(trainSteps(t, out)) > after
	})
}

// TestGPUWorkloadServe: workload (c) through cryo-runc: cold start, then
// checkpoint and restore; answers after the restore must equal those before,
// and restore to first answer is compared with the cold start.
func TestGPUWorkloadServe(t *testing.T) {
	py := torchPython(t)
	gib := envInt("CRYO_SERVE_GIB", 3)
	weights := serveWeights(t, py, gib)
	script := filepath.Join(workloadsDir(t), "torchserve/serve.py")
	for _, f := range gpuFlavors() {
		t.Run(f.name, func(t *testing.T) {
			s := startServeWith(t, f, "cryo-gpu-serve", py, script, weights, nil)
			serveAcrossRestore(t, f.name, s)
		})
	}
}

// serveAcrossRestore checkpoints and restores the server: its answers after
// the restore must equal those before; then checks the check.
func serveAcrossRestore(t *testing.T, flavor string, s *served) {
	report(t, "serve ("+flavor+"): cold start to first answer", s.cold)
	report(t, "serve ("+flavor+"): checkpoint", s.task.Checkpoint())
	t0 := time.Now()
	s.task.Restore()
	first := firstAnswer(t, s.addr, "infer 1", 3*time.Minute, s.task.Output)
	restore := time.Since(t0)
	report(t, "serve ("+flavor+"): restore to first answer", restore)
	t.Logf("cold start %.2fs, restore to first answer %.2fs: %.1fx faster", s.cold.Seconds(), restore.Seconds(), s.cold.Seconds()/restore.Seconds())
	if first != s.answers[0] {
		t.Fatalf("after the restore %q, before %q", first, s.answers[0])
	}
	s.check(t)

	// Check the check: one flipped byte of layer 0.
	s.task.signal("USR1")
	harness.WaitFor(t, 30*time.Second, "the server to corrupt its weights", func() bool {
		return strings.Contains(s.task.Output(), "corrupted one byte")
	})
	a, err := ask(s.addr, "infer 2", time.Minute)
	v, err2 := ask(s.addr, "verify", time.Minute)
	if err != nil || err2 != nil {
		t.Fatalf("server after corruption: %v %v", err, err2)
	}
	if a == s.answers[1] || !strings.HasPrefix(v, "verify=BAD") {
		t.Fatalf("a corrupted weight went unnoticed: %q (before %q), %q", a, s.answers[1], v)
	}
	t.Logf("check of the check: corruption noticed (%s; answer changed)", v)
}

// served is a running torchserve container and its answers before any checkpoint.
type served struct {
	c       *harness.RuncContainer // its bundle (and runc container, for cryo-runc and plain runc)
	task    gpuTask
	addr    string // the server's HTTP API, HOST:PORT on the loopback
	cold    time.Duration
	answers []string // infer 1, 2, 3
}

var readyRe = regexp.MustCompile(`(?m)^ready cold_start_s=.*$`)

// startServe starts the server in a container of runc (cryo-runc or plain
// runc), and waits for its first answers.
func startServe(t *testing.T, runc, id string, py *hostPython, script, weights string) *served {
	return startServeWith(t, runcFlavor(filepath.Base(runc)), id, py, script, weights, nil, runc)
}

// startServeWith starts the server through the front end f, with extra
// arguments after its own, and waits for its first answers; runc (default
// cryo-runc) runs the bundle's container. weights (a file or a folder) is
// bound read-only under /weights.
func startServeWith(t *testing.T, f gpuFlavor, id string, py *hostPython, script, weights string, extra []string, runc ...string) *served {
	t.Helper()
	s := &served{addr: serveAddr(t)}
	mounts := []specs.Mount{roBind(filepath.Dir(weights), "/weights")}
	args := append([]string{py.exe, "/app/serve.py", "--weights", "/weights/" + filepath.Base(weights), "--listen", s.addr}, extra...)
	if os.Getenv("CRYO_SERVE_COMPILE") == "1" && filepath.Base(script) == "serve.py" {
		args = append(args, "--compile") // a production-like cold start: torch.compile with autotuning
	}
	r := harness.CryoBin(t, "cryo-runc")
	if len(runc) > 0 {
		r = runc[0]
	}
	s.c = pyContainer(t, r, id, py, map[string]string{"/app/serve.py": script}, mounts, args...)
	t0 := time.Now()
	s.task = f.start(t, s.c)
	first := firstAnswer(t, s.addr, "infer 1", 4*time.Minute, s.task.Output)
	s.cold = time.Since(t0)
	t.Logf("%s", readyRe.FindString(s.task.Output()))
	s.answers = []string{first}
	for _, seed := range []string{"2", "3"} {
		a, err := ask(s.addr, "infer "+seed, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		s.answers = append(s.answers, a)
	}
	s.check(t)
	return s
}

// check asks the three requests again and verify: same answers, verify=OK.
func (s *served) check(t *testing.T) {
	t.Helper()
	for i, want := range s.answers {
		got, err := ask(s.addr, fmt.Sprintf("infer %d", i+1), time.Minute)
		if err != nil || got != want {
			t.Fatalf("answer %d: %q (%v), want %q", i+1, got, err, want)
		}
	}
	if v, err := ask(s.addr, "verify", time.Minute); err != nil || v != "verify=OK" {
		t.Fatalf("server verify: %q %v\n%s", v, err, harness.Tail(s.task.Output(), 20))
	}
}

var workerTickRe = regexp.MustCompile(`(?m)^tick (\d+) counter=\d+ verify=(OK|BAD).* w=(\w+)$`)

// workerTicks is each worker's last tick; it fails on any verify=BAD.
func workerTicks(t *testing.T, out string) map[string]int {
	t.Helper()
	harness.LastTick(t, out) // fails on verify=BAD or a CUDA error
	ticks := map[string]int{}
	for _, m := range workerTickRe.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		ticks[m[3]] = n
	}
	return ticks
}

// TestGPUWorkloadMulti: workload (d), a container with a parent shell and
// three CUDA workers, through cryo-runc and the shim: all three are
// suspended (in parallel), dumped, restored and resumed, and each verifies
// its memory and counter.
func TestGPUWorkloadMulti(t *testing.T) {
	gpuOrSkip(t)
	workers := []string{"w1", "w2", "w3"}
	for _, f := range gpuFlavors() {
		t.Run(f.name, func(t *testing.T) {
			dir := t.TempDir()
			bundle := filepath.Join(dir, "bundle")
			root := gpuRootfs(t, bundle)
			harness.CopyFile(t, filepath.Join(workloadsDir(t), "multiproc/multi.sh"), filepath.Join(root, "bin/multi"), 0o755)
			gpuSpec(t, bundle, append([]string{"/bin/sh", "/bin/multi", "256", "100"}, workers...)...)
			c := &harness.RuncContainer{T: t, Runc: harness.CryoBin(t, "cryo-runc"), Root: filepath.Join(dir, "runc-root"), Bundle: bundle, ID: "cryo-gpu-multi", Log: &testsupport.Buffer{}}
			t.Cleanup(c.Remove)
			task := f.start(t, c)
			waitWorkers(t, task, workers, nil, "every worker's first ticks")
			report(t, "multi (3 processes, "+f.name+"): checkpoint", task.Checkpoint())
			if r, ok := task.(*runcTask); ok {
				multiManifest(t, r.img, workers)
			}
			at := workerTicks(t, task.Output())
			report(t, "multi (3 processes, "+f.name+"): restore", task.Restore())
			waitWorkers(t, task, workers, at, "every worker's ticks after the restore")
			t.Logf("ticks at the checkpoint %v, after the restore %v", at, workerTicks(t, task.Output()))
		})
	}
}

// multiManifest checks that a cryo-runc checkpoint of the multi container
// lists every worker.
func multiManifest(t *testing.T, img string, workers []string) {
	m, err := manifest.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Processes) != len(workers) {
		t.Fatalf("the manifest lists %d CUDA processes, want %d: %+v", len(m.Processes), len(workers), m.Processes)
	}
	t.Logf("checkpoint steps: %s", stepsString(m.Steps))
}

func waitWorkers(t *testing.T, c gpuTask, workers []string, after map[string]int, what string) {
	t.Helper()
	harness.WaitFor(t, 2*time.Minute, what, func() bool {
		ticks := workerTicks(t, c.Output())
		for _, w := range workers {
			if ticks[w] <= after[w]+1 {
				return false
			}
		}
		return true
	})
}

func stepsString(steps []manifest.Step) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "%s %.3fs ", s.Name, s.Seconds)
	}
	return strings.TrimSpace(b.String())
}

// TestGPUCycles: 20 back-to-back cryo-runc checkpoint/restore cycles of the
// CUDA workload (a). Every cycle the workload verifies its memory and GPU
// counter; the GPU memory in use and the workload's open files stay the
// same; afterwards no GPU memory, cryo or CRIU process is left. Then the
// check of the check: a corrupted byte is reported as verify=BAD.
func TestGPUCycles(t *testing.T) {
	gpuOrSkip(t)
	cycles := envInt("CRYO_GPU_CYCLES", 20)
	mib := strconv.Itoa(envInt("CRYO_GPU_CYCLE_MIB", 256))
	wrap := harness.CryoBin(t, "cryo-runc")
	baseMem, baseProcs := gpuMemoryUsedMiB(t), userProcs()
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	gpuRootfs(t, bundle)
	gpuSpec(t, bundle, "/bin/cudamem", mib, "50")
	c := &harness.RuncContainer{T: t, Runc: wrap, Root: filepath.Join(dir, "runc-root"), Bundle: bundle, ID: "cryo-gpu-cycles", Log: &testsupport.Buffer{}}
	t.Cleanup(c.Remove)
	c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
	c.TicksAfter(1, "first ticks")
	t.Logf("before the first checkpoint: GPU memory %d MiB (baseline %d), %d fds", gpuMemoryUsedMiB(t), baseMem, fdCount(c.PID()))

	var ckpt, rest time.Duration
	var mem0, fds0 int
	for i := 1; i <= cycles; i++ {
		img := filepath.Join(dir, "img")
		ckpt += c.Checkpoint(img)
		n := harness.LastTick(t, c.Log.String())
		rest += c.Restore(img)
		c.TicksAfter(n, fmt.Sprintf("ticks after restore %d", i))
		mem, fds := gpuMemoryUsedMiB(t), fdCount(c.PID())
		t.Logf("cycle %d: tick %d verified, GPU memory %d MiB, %d fds", i, harness.LastTick(t, c.Log.String()), mem, fds)
		if i == 1 {
			mem0, fds0 = mem, fds
		} else if mem > mem0+16 || fds != fds0 {
			t.Errorf("cycle %d: GPU memory %d MiB (after cycle 1: %d), fds %d (after cycle 1: %d)", i, mem, mem0, fds, fds0)
		}
		if err := os.RemoveAll(img); err != nil {
			t.Fatal(err)
		}
	}
	report(t, fmt.Sprintf("cycles: mean cryo-runc checkpoint (%s MiB)", mib), ckpt/time.Duration(cycles))
	report(t, fmt.Sprintf("cycles: mean cryo-runc restore (%s MiB)", mib), rest/time.Duration(cycles))

	// Check the check: a corrupted byte must show as verify=BAD.
	c.Kill("USR1")
	harness.WaitFor(t, 30*time.Second, "verify=BAD after a corrupted byte", func() bool {
		return strings.Contains(c.Log.String(), "verify=BAD")
	})
	t.Logf("check of the check: %s", harness.Tail(c.Log.String(), 2))

	c.Remove()
	harness.WaitFor(t, 30*time.Second, "the GPU memory to return to its baseline", func() bool {
		return gpuMemoryUsedMiB(t) <= baseMem+8
	})
	for pid, cmd := range userProcs() {
		if _, ok := baseProcs[pid]; !ok && (strings.Contains(cmd, "cryo") || strings.Contains(cmd, "criu") || strings.Contains(cmd, "cudamem")) {
			t.Errorf("left behind: pid %d %s", pid, cmd)
		}
	}
	t.Logf("after %d cycles: GPU memory %d MiB (baseline %d), no cryo, CRIU or workload process left", cycles, gpuMemoryUsedMiB(t), baseMem)
}

// TestGPURollback: a failure injected into CRIU during a checkpoint (a CRIU
// that fails, through a runc wrapper for cryo-runc and through CRYO_CRIU for
// `cryo checkpoint`); the workload must keep running with its GPU state.
func TestGPURollback(t *testing.T) {
	gpuOrSkip(t)
	dir := t.TempDir()
	failCRIU := filepath.Join(dir, "criu-fail")
	harness.WriteFile(t, failCRIU, "#!/bin/sh\necho 'cryo test: injected CRIU failure' >&2\nexit 1\n")
	realRunc := rawRunc()
	wrapper := filepath.Join(dir, "runc-inject")
	harness.WriteFile(t, wrapper, fmt.Sprintf(`#!/bin/sh
# runc, with a failing CRIU for checkpoints
for a in "$@"; do
	if [ "$a" = checkpoint ]; then exec %q --criu %q "$@"; fi
done
exec %q "$@"
`, realRunc, failCRIU, realRunc))
	for _, f := range []string{failCRIU, wrapper} {
		if err := os.Chmod(f, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cryo, wrap := harness.CryoBin(t, "cryo"), harness.CryoBin(t, "cryo-runc")

	t.Run("cryo-runc", func(t *testing.T) {
		bundle := filepath.Join(dir, "bundle")
		gpuRootfs(t, bundle)
		gpuSpec(t, bundle, "/bin/cudamem", "512", "100")
		c := &harness.RuncContainer{T: t, Runc: wrap, Root: filepath.Join(dir, "runc-root"), Bundle: bundle, ID: "cryo-gpu-rollback", Log: &testsupport.Buffer{}}
		t.Cleanup(c.Remove)
		c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
		c.TicksAfter(2, "first ticks")
		mem := gpuMemoryUsedMiB(t)
		out, err := harness.RunErr(2*time.Minute, []string{"CRYO_RUNC=" + wrapper}, wrap, "--root", c.Root, "checkpoint", "--image-path", filepath.Join(dir, "img"), c.ID)
		if err == nil {
			t.Fatalf("checkpoint with a failing CRIU succeeded:\n%s", out)
		}
		t.Logf("checkpoint failed as it should:\n%s", harness.Tail(out, 8))
		checkRolledBack(t, cryo, c.PID(), mem, c.Log.String)
	})

	t.Run("cryo checkpoint", func(t *testing.T) {
		reapOrphans(t)
		logPath := filepath.Join(dir, "bare.log")
		cmd := startDetached(t, logPath, cudamemBin(t), "512", "100")
		pid := cmd.Process.Pid
		defer killPid(pid)
		harness.WaitTicks(t, func() string { return harness.ReadFile(logPath) }, 2, "first ticks")
		mem := gpuMemoryUsedMiB(t)
		out, err := harness.RunErr(2*time.Minute, []string{"CRYO_CRIU=" + failCRIU}, cryo, "checkpoint", "--pid", strconv.Itoa(pid), "--dir", filepath.Join(dir, "bare-img"))
		if err == nil {
			t.Fatalf("checkpoint with a failing CRIU succeeded:\n%s", out)
		}
		t.Logf("checkpoint failed as it should:\n%s", harness.Tail(out, 8))
		checkRolledBack(t, cryo, pid, mem, func() string { return harness.ReadFile(logPath) })
	})
}

// checkRolledBack: the driver says running, the GPU memory is back, and the
// workload ticks on with verify=OK.
func checkRolledBack(t *testing.T, cryo string, pid, mem int, out func() string) {
	t.Helper()
	st := harness.Run(t, time.Minute, nil, cryo, "cuda", "state", strconv.Itoa(pid))
	if !strings.Contains(st, "running") {
		t.Fatalf("driver state after the failed checkpoint: %s", st)
	}
	n := harness.LastTick(t, out())
	after := harness.WaitTicks(t, out, n+2, "ticks after the failed checkpoint")
	if now := gpuMemoryUsedMiB(t); now < mem-16 {
		t.Fatalf("GPU memory %d MiB after the rollback, %d before", now, mem)
	}
	t.Logf("rolled back: state %s, ticks %d → %d with verify=OK", strings.TrimSpace(st), n, after)
}
