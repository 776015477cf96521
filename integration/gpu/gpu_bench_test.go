package gpu

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// TestBenchGPU is `make bench` (integration/gpu/bench.sh): cryo against the
// raw sequence (the driver's suspend through `cryo cuda suspend`, then plain
// runc), side by side in one run, for the CUDA workload at each size of
// $CRYO_BENCH_MIB, for several CUDA processes, and for the inference server
// against its cold start (also with the page cache dropped, for both). Rows go to $CRYO_BENCH_OUT as
// "workload<TAB>size_mib<TAB>figure<TAB>value"; bench_report.py makes the
// table and the plot. It runs only with CRYO_BENCH=1.
func TestBenchGPU(t *testing.T) {
	if os.Getenv("CRYO_BENCH") == "" {
		t.Skip("benchmarks run with `make bench` on a GPU host (CRYO_BENCH=1)")
	}
	gpuOrSkip(t)
	b := &bench{t: t, path: os.Getenv("CRYO_BENCH_OUT")}
	sizes := os.Getenv("CRYO_BENCH_MIB")
	if sizes == "" {
		sizes = "4096 16384"
	}
	if sizes == "none" {
		sizes = ""
	}
	warmHostMemory(t)
	for _, s := range strings.Fields(sizes) {
		mib, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("CRYO_BENCH_MIB: %v", err)
		}
		b.cudamem(mib)
		b.pause(mib)
	}
	if n := envInt("CRYO_BENCH_PROCS", 4); n > 1 {
		b.multi(n, envInt("CRYO_BENCH_PROC_MIB", 4096))
	}
	if os.Getenv("CRYO_BENCH_SERVE") != "0" {
		b.serve(envInt("CRYO_SERVE_GIB", 3))
	}
	if os.Getenv("CRYO_BENCH_LLM") != "0" {
		b.llm()
	}
}

// warmHostMemory writes to most of the free memory once, then frees it. On
// a virtual machine (the GPU hosts these figures come from are Firecracker
// VMs) the first write to a guest page costs the hypervisor a fault: the
// first run of a fresh machine paid seconds for it (6.1 s for a raw 4 GiB
// checkpoint that took 4.6-5.0 s afterwards), which is not what cryo or
// the raw sequence costs on a host in service. CRYO_BENCH_WARMUP=0 skips it.
func warmHostMemory(t *testing.T) {
	if os.Getenv("CRYO_BENCH_WARMUP") == "0" {
		return
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return
	}
	free := int64(si.Freeram) * int64(si.Unit)
	n := free * 7 / 10 / (1 << 30) // GiB, leaving room for everything else
	start := time.Now()
	// All mapped at once, so that the pages touched are distinct ones.
	bufs := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range bufs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, err := unix.Mmap(-1, 0, 1<<30, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				return
			}
			for off := 0; off < len(buf); off += 4096 {
				buf[off] = 1
			}
			bufs[i] = buf
		}()
	}
	wg.Wait()
	for _, b := range bufs {
		if b != nil {
			_ = unix.Munmap(b)
		}
	}
	t.Logf("warmed %d GiB of host memory in %.1fs", n, time.Since(start).Seconds())
}

type bench struct {
	t    *testing.T
	path string
	mu   sync.Mutex
}

// row records one figure (seconds, or bytes where the name says so).
func (b *bench) row(workload string, mib int, figure string, v float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.t.Logf("BENCH %s %d MiB: %s = %.3f", workload, mib, figure, v)
	if b.path == "" {
		return
	}
	f, err := os.OpenFile(b.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		b.t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%d\t%s\t%.4f\n", workload, mib, figure, v)
}

func (b *bench) steps(workload string, mib int, img string) {
	m, err := manifest.Read(img)
	if err != nil {
		b.t.Fatalf("manifest: %v", err)
	}
	for _, s := range m.Steps {
		b.row(workload, mib, "cryo checkpoint step: "+s.Name, s.Seconds)
	}
}

func (b *bench) sizes(workload string, mib int, img string, compress bool) {
	b.row(workload, mib, "image bytes", float64(harness.DirBytes(b.t, img)))
	if compress {
		start := time.Now()
		n := zstdBytes(b.t, img)
		b.row(workload, mib, "image bytes zstd-fastest", float64(n))
		b.row(workload, mib, "zstd-fastest time", time.Since(start).Seconds())
	}
}

// runcFor is cryo-runc for "cryo" and the plain runc for "raw".
func runcFor(t *testing.T, mode string) string {
	if mode == "cryo" {
		return harness.CryoBin(t, "cryo-runc")
	}
	return rawRunc()
}

// criuFor is the CRIU that runc runs: cryo's own (patched, contrib/criu)
// for "cryo", and stock CRIU for the raw baseline, which is what the driver
// plus plain runc and CRIU give.
func criuFor(t *testing.T, mode string) string {
	if mode == "cryo" {
		return ""
	}
	return harness.StockCRIU(t)
}

// cudamem: checkpoint and restore of the CUDA workload at mib MiB, through
// cryo-runc and through the raw sequence.
func (b *bench) cudamem(mib int) {
	t := b.t
	base := gpuMemoryUsedMiB(t)
	for _, mode := range benchOrder() {
		dir := t.TempDir()
		bundle := filepath.Join(dir, "bundle")
		gpuRootfs(t, bundle)
		gpuSpec(t, bundle, "/bin/cudamem", strconv.Itoa(mib), "20")
		c := &harness.RuncContainer{T: t, Runc: runcFor(t, mode), CRIU: criuFor(t, mode), Root: filepath.Join(dir, "runc-root"), Bundle: bundle, ID: "cryo-bench-" + mode, Log: &testsupport.Buffer{}}
		c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
		c.TicksAfter(1, "first ticks")
		img := filepath.Join(dir, "img")
		b.Checkpoint("cudamem", mib, mode, c, img, base)
		b.sizes("cudamem", mib, img, mode == "cryo" && os.Getenv("CRYO_BENCH_ZSTD") != "0")
		n := harness.LastTick(t, c.Log.String())
		start := b.Restore("cudamem", mib, mode, c, img)
		waitTickFast(t, c, n)
		b.row("cudamem", mib, mode+" restore to first output", time.Since(start).Seconds())
		c.Remove()
		_ = os.RemoveAll(img)
		harness.WaitFor(t, time.Minute, "the GPU memory to return to its baseline", func() bool { return gpuMemoryUsedMiB(t) <= base+8 })
	}
}

// multi: n bare CUDA processes of mib MiB each, suspended and resumed by one
// `cryo cuda suspend|resume` call, the driver calls one process after
// another and then all at once.
func (b *bench) multi(n, mib int) {
	t := b.t
	reapOrphans(t)
	cryo, app := harness.CryoBin(t, "cryo"), cudamemBin(t)
	base := gpuMemoryUsedMiB(t)
	dir := t.TempDir()
	var pids []string
	var logs []string
	for i := 0; i < n; i++ {
		logPath := filepath.Join(dir, fmt.Sprintf("w%d.log", i))
		cmd := startDetached(t, logPath, app, strconv.Itoa(mib), "20")
		pid := cmd.Process.Pid
		t.Cleanup(func() { killPid(pid) })
		pids, logs = append(pids, strconv.Itoa(pid)), append(logs, logPath)
	}
	for _, l := range logs {
		harness.WaitTicks(t, func() string { return harness.ReadFile(l) }, 1, "every worker's first ticks")
	}
	label := fmt.Sprintf("%d processes", n)
	// One after another (--parallel 1), then cryo's default: every process's
	// driver calls at once, each in its own helper.
	for _, mode := range []struct{ name, flag string }{{"sequential", "--parallel=1"}, {"parallel", "--parallel=0"}} {
		free := watchGPUFree(t, base)
		b.row(label, n*mib, "cryo cuda suspend ("+mode.name+")", harness.Timed(t, nil, cryo, append([]string{"cuda", "suspend", mode.flag}, pids...)...).Seconds())
		b.row(label, n*mib, "cryo GPU free ("+mode.name+")", free().Seconds())
		b.row(label, n*mib, "cryo cuda resume ("+mode.name+")", harness.Timed(t, nil, cryo, append([]string{"cuda", "resume", mode.flag}, pids...)...).Seconds())
		for _, l := range logs {
			m := harness.LastTick(t, harness.ReadFile(l))
			harness.WaitTicks(t, func() string { return harness.ReadFile(l) }, m, "every worker's ticks after the resume")
		}
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p)
		killPid(pid)
	}
}

// serve: the inference server's cold start, then checkpoint and restore to
// its first answer, through cryo-runc and through the raw sequence.
func (b *bench) serve(gib int) {
	t := b.t
	py := torchPython(t)
	weights := serveWeights(t, py, gib)
	script := filepath.Join(workloadsDir(t), "torchserve/serve.py")
	mib := gib * 1024
	base := gpuMemoryUsedMiB(t)
	for _, mode := range []string{"cryo", "raw"} {
		s := startServe(t, runcFor(t, mode), "cryo-bench-serve-"+mode, py, script, weights)
		s.c.CRIU = criuFor(t, mode)
		b.row("serve", mib, "cold start to first answer", s.cold.Seconds())
		t.Logf("%s", readyRe.FindString(s.c.Log.String()))
		img := filepath.Join(t.TempDir(), "img")
		b.Checkpoint("serve", mib, mode, s.c, img, base)
		b.sizes("serve", mib, img, false)
		start := b.Restore("serve", mib, mode, s.c, img)
		first := firstAnswer(t, s.addr, "infer 1", 3*time.Minute, s.c.Log.String)
		b.row("serve", mib, mode+" restore to first output", time.Since(start).Seconds())
		if first != s.answers[0] {
			t.Fatalf("serve (%s): after the restore %q, before %q", mode, first, s.answers[0])
		}
		s.c.Remove()
		_ = os.RemoveAll(img)
		harness.WaitFor(t, time.Minute, "the GPU memory to return to its baseline", func() bool { return gpuMemoryUsedMiB(t) <= base+8 })
	}

	// Cold caches: the page cache dropped before the cold start and before
	// the restore (a fresh node, or one whose memory went to other work).
	if !dropCaches(t) {
		return
	}
	s := startServe(t, harness.CryoBin(t, "cryo-runc"), "cryo-bench-serve-cold", py, script, weights)
	b.row("serve", mib, "cold start to first answer, page cache dropped", s.cold.Seconds())
	img := filepath.Join(t.TempDir(), "img")
	s.c.Checkpoint(img)
	// The same image restored three times, the page cache dropped before
	// each: raw, cryo, raw again. The image's first read from disk may warm
	// a cache below this machine's (a VM's backing store), so the order is
	// reported, and the raw figure is the first one.
	raw := *s.c
	raw.Runc, raw.CRIU = runcFor(t, "raw"), criuFor(t, "raw")
	b.row("serve", mib, "raw restore to first output, page cache dropped", coldRestore(t, &raw, s, img).Seconds())
	b.row("serve", mib, "cryo restore to first output, page cache dropped", coldRestore(t, s.c, s, img).Seconds())
	b.row("serve", mib, "raw restore to first output, page cache dropped, after cryo's", coldRestore(t, &raw, s, img).Seconds())
	_ = os.RemoveAll(img)
}

// llm: the transformers server (contrib/workloads/llmserve) with the memory
// profile of a production inference server: $CRYO_LLM_WEIGHTS_GIB (8) of
// random bf16 weights loaded from safetensors, and a KV-cache pool
// allocated zeroed, $CRYO_LLM_CACHE_GIB (32) or what fills the GPU to
// $CRYO_LLM_GPU_UTIL (such as 0.9), 64 MiB of it written. For cryo and for
// the raw sequence in turn: the cold start with the page cache dropped,
// the checkpoint, the image, the restore to the first generated tokens
// with the page cache warm, then again from the same image with it
// dropped; after each restore the answers and the server's own check of
// its weights and pool must be as before.
func (b *bench) llm() {
	t := b.t
	py := torchPython(t)
	model := llmModel(t, py, envInt("CRYO_LLM_WEIGHTS_GIB", 8))
	script := filepath.Join(workloadsDir(t), "llmserve/llmserve.py")
	args := llmCacheArgs(t)
	base := gpuMemoryUsedMiB(t)
	mib := 0
	for _, mode := range benchOrder() {
		dropCaches(t)
		r := runcFor(t, mode)
		s := startServeWith(t, runcFlavor(filepath.Base(r)), "cryo-bench-llm-"+mode, py, script, model, args, r)
		s.c.CRIU = criuFor(t, mode)
		if mib == 0 {
			mib = gpuMemoryUsedMiB(t) - base
		}
		b.row("llm", mib, "cold start to first answer, page cache dropped", s.cold.Seconds())
		b.coldStartSteps("llm", mib, s.c.Log.String())
		img := filepath.Join(t.TempDir(), "img")
		b.Checkpoint("llm", mib, mode, s.c, img, base)
		b.row("llm", mib, mode+" image bytes", float64(harness.DirBytes(t, img)))
		start := b.Restore("llm", mib, mode, s.c, img)
		first := firstAnswer(t, s.addr, "infer 1", 3*time.Minute, s.c.Log.String)
		b.row("llm", mib, mode+" restore to first output", time.Since(start).Seconds())
		if first != s.answers[0] {
			t.Fatalf("llm (%s): after the restore %q, before %q", mode, first, s.answers[0])
		}
		s.check(t)
		s.c.Remove()
		// The same image again, the page cache dropped: a fresh node.
		const cold = ", page cache dropped"
		s.c.Log = &testsupport.Buffer{}
		dropCaches(t)
		start = b.restoreAs("llm", mib, mode, s.c, img, cold)
		first = firstAnswer(t, s.addr, "infer 1", 3*time.Minute, s.c.Log.String)
		b.row("llm", mib, mode+" restore to first output"+cold, time.Since(start).Seconds())
		if first != s.answers[0] {
			t.Fatalf("llm (%s, page cache dropped): after the restore %q, before %q", mode, first, s.answers[0])
		}
		s.check(t)
		s.c.Remove()
		_ = os.RemoveAll(img)
		harness.WaitFor(t, time.Minute, "the GPU memory to return to its baseline", func() bool { return gpuMemoryUsedMiB(t) <= base+8 })
	}
	b.llmSleep(py, model, script, args, mib, base)
}

// llmCacheArgs are llmserve's pool arguments from $CRYO_LLM_GPU_UTIL or
// $CRYO_LLM_CACHE_GIB.
func llmCacheArgs(t *testing.T) []string {
	if u := os.Getenv("CRYO_LLM_GPU_UTIL"); u != "" {
		if f, err := strconv.ParseFloat(u, 64); err != nil || f <= 0 || f >= 1 {
			t.Fatalf("CRYO_LLM_GPU_UTIL=%q: want a fraction such as 0.9", u)
		}
		return []string{"--gpu-util", u}
	}
	return []string{"--cache-gib", strconv.Itoa(envInt("CRYO_LLM_CACHE_GIB", 32))}
}

var coldStepRe = regexp.MustCompile(`\b(import|load|warmup|cache|capture)_s=([0-9.]+)`)

// coldStartSteps records the parts of a server's cold start from its ready line.
func (b *bench) coldStartSteps(workload string, mib int, log string) {
	line := readyRe.FindString(log)
	b.t.Logf("%s", line)
	for _, m := range coldStepRe.FindAllStringSubmatch(line, -1) {
		if v, err := strconv.ParseFloat(m[2], 64); err == nil {
			b.row(workload, mib, "cold start step: "+m[1], v)
		}
	}
}

// checkpoint checkpoints c into img through cryo-runc ("cryo") or the raw
// sequence (the driver's suspend through `cryo cuda suspend`, then plain
// runc with stock CRIU), and records the time, the GPU-free time (GPU
// memory back at base MiB) and, for cryo, its steps.
func (b *bench) Checkpoint(workload string, mib int, mode string, c *harness.RuncContainer, img string, base int) {
	t := b.t
	flushDirty(t)
	free := watchGPUFree(t, base)
	if mode == "cryo" {
		b.row(workload, mib, "cryo checkpoint", c.Checkpoint(img).Seconds())
		b.row(workload, mib, "cryo GPU free", free().Seconds())
		b.steps(workload, mib, img)
		return
	}
	d1 := harness.Timed(t, nil, harness.CryoBin(t, "cryo"), "cuda", "suspend", strconv.Itoa(c.PID()))
	b.row(workload, mib, "raw GPU free", free().Seconds())
	d2 := c.Checkpoint(img)
	b.row(workload, mib, "raw driver suspend", d1.Seconds())
	b.row(workload, mib, "raw runc checkpoint", d2.Seconds())
	b.row(workload, mib, "raw checkpoint", (d1 + d2).Seconds())
}

// restore restores img into c through cryo-runc or the raw sequence (plain
// runc, then the driver's resume), records each command's time, and
// returns when it started: the caller times the way to the first output.
func (b *bench) Restore(workload string, mib int, mode string, c *harness.RuncContainer, img string) time.Time {
	return b.restoreAs(workload, mib, mode, c, img, "")
}

// restoreAs is restore with suffix after the names of its figures.
func (b *bench) restoreAs(workload string, mib int, mode string, c *harness.RuncContainer, img, suffix string) time.Time {
	start := time.Now()
	if mode == "cryo" {
		c.RunLog = filepath.Join(b.t.TempDir(), "cryo-runc.log")
		b.row(workload, mib, "cryo restore command"+suffix, c.Restore(img).Seconds())
		b.restoreSteps(workload, mib, c, suffix)
		c.RunLog = ""
		return start
	}
	d1 := c.Restore(img)
	d2 := harness.Timed(b.t, nil, harness.CryoBin(b.t, "cryo"), "cuda", "resume", strconv.Itoa(c.PID()))
	b.row(workload, mib, "raw runc restore"+suffix, d1.Seconds())
	b.row(workload, mib, "raw driver resume"+suffix, d2.Seconds())
	return start
}

var restoreStepsRe = regexp.MustCompile(`restore of container \S+: ((?:[\w-]+ [0-9.]+s(?:, )?)+)`)

// restoreSteps records the steps of cryo-runc's last restore of c, from
// the line it logs at the end ("restore of container ID: verify 0.012s, ...").
func (b *bench) restoreSteps(workload string, mib int, c *harness.RuncContainer, suffix string) {
	data, _ := os.ReadFile(c.RunLog)
	m := restoreStepsRe.FindAllStringSubmatch(string(data), -1)
	if m == nil {
		b.t.Logf("no restore steps in %s", c.RunLog)
		return
	}
	for _, part := range strings.Split(m[len(m)-1][1], ", ") {
		name, secs, _ := strings.Cut(part, " ")
		if v, err := strconv.ParseFloat(strings.TrimSuffix(secs, "s"), 64); err == nil {
			b.row(workload, mib, "cryo restore step: "+name+suffix, v)
		}
	}
}

// coldRestore drops the page cache, restores img with c (cryo-runc, or plain
// runc followed by the driver's resume), waits for the first answer, checks
// it, removes the container and returns the time to that answer.
func coldRestore(t *testing.T, c *harness.RuncContainer, s *served, img string) time.Duration {
	c.Log = &testsupport.Buffer{}
	dropCaches(t)
	start := time.Now()
	c.Restore(img)
	if !strings.HasSuffix(c.Runc, "cryo-runc") {
		harness.Timed(t, nil, harness.CryoBin(t, "cryo"), "cuda", "resume", strconv.Itoa(c.PID()))
	}
	first := firstAnswer(t, s.addr, "infer 1", 3*time.Minute, c.Log.String)
	d := time.Since(start)
	if first != s.answers[0] {
		t.Fatalf("serve (%s): after the restore %q, before %q", filepath.Base(c.Runc), first, s.answers[0])
	}
	c.Remove()
	return d
}

// benchOrder is the order of the two runs at each size: $CRYO_BENCH_ORDER,
// default "cryo raw". Swapping it shows whether going first costs a run
// anything (memory the host has not touched yet, writeback).
func benchOrder() []string {
	if o := strings.Fields(os.Getenv("CRYO_BENCH_ORDER")); len(o) == 1 || len(o) == 2 {
		return o
	}
	return []string{"cryo", "raw"}
}

// flushDirty writes out the dirty page cache before a measured checkpoint:
// otherwise whichever run comes next pays for the writeback of the images
// written before it (17 GB after a 16 GiB run).
func flushDirty(t *testing.T) {
	if out, err := harness.RunErr(5*time.Minute, nil, "sync"); err != nil {
		t.Logf("sync: %v %s", err, out)
	}
}

// dropCaches empties the page cache (as root), reporting whether it could.
func dropCaches(t *testing.T) bool {
	if out, err := harness.RunErr(time.Minute, nil, "sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"); err != nil {
		t.Logf("cannot drop the page cache: %v %s", err, out)
		return false
	}
	return true
}

// watchGPUFree polls nvidia-smi from now on; the function it returns waits
// until the GPU memory in use is back to base (+64 MiB) and returns how long
// that took from the call of watchGPUFree.
func watchGPUFree(t *testing.T, base int) func() time.Duration {
	start := time.Now()
	done := make(chan time.Duration, 1)
	go func() {
		for time.Since(start) < 3*time.Minute {
			if m := gpuMemoryUsedMiB(t); m >= 0 && m <= base+64 {
				done <- time.Since(start)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		done <- -1
	}()
	return func() time.Duration { return <-done }
}

// waitTickFast waits, polling every 5 ms, for a tick beyond n.
func waitTickFast(t *testing.T, c *harness.RuncContainer, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if harness.LastTick(t, c.Log.String()) > n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no tick after %d:\n%s", n, harness.Tail(c.Log.String(), 20))
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// zstdBytes is the size of the image directory's files compressed with
// zstd at its fastest level, all cores.
func zstdBytes(t *testing.T, dir string) int64 {
	cw := &countWriter{}
	enc, err := zstd.NewWriter(cw, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(enc, f)
		return err
	})
	if err == nil {
		err = enc.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return cw.n
}
