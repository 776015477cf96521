package gpu

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// TestBenchShim compares, side by side in one run and for the same
// container memory size ($CRYO_BENCH_SHIM_MIB, default 1024), checkpoint
// and restore to the first output through cryo-runc (runc with cryo-runc
// as its runtime), through containerd 2.x and the shim by containerd's
// content store (`ctr task checkpoint`, restore with WithTaskCheckpoint),
// and through the shim by an image directory (`ctr task checkpoint
// --image-path`, restore with WithRestoreImagePath). Every checkpoint but
// CRI's stops the container (--exit), as runc's checkpoint does. On a GPU host
// the workload is cudamem on the real driver; elsewhere fakecuda-app on
// the fake one, whose buffer is ordinary private memory. The page cache
// is dropped before each checkpoint; restores read warm images. Rows go
// to $CRYO_BENCH_OUT like TestBenchGPU's. It runs only with CRYO_BENCH=1.
//
// After cryo-runc, the Kubernetes route through CRI (shimCRI, rows
// "CRI runnable ..."): CRYO_BENCH_SHIM_CRI=0 skips it, =only runs it and
// cryo-runc alone. Disk: each copy of a checkpoint goes once the next step
// has read it, so that cryo-runc and the CRI route need at most three
// times the checkpoint free (CRI's checkpoint: ~52 GB at 16 GiB, a 17 GB
// checkpoint); the routes through containerd's client keep their copies
// to the end and need about nine times it, so a large size runs with
// CRYO_BENCH_SHIM_CRI=only.
func TestBenchShim(t *testing.T) {
	if os.Getenv("CRYO_BENCH") == "" {
		t.Skip("benchmarks run with CRYO_BENCH=1 (make bench on a GPU host)")
	}
	harness.RequireRoot(t)
	v := harness.CtrdVersions[1]
	if _, err := os.Stat(filepath.Join(harness.DepsDir(), v.Dir, "usr/bin/containerd")); err != nil {
		t.Skipf("containerd 2.x is not here (%v): the shim's routes need it; `make deps` installs it, `make dist` bundles it", err)
	}
	mib := envInt("CRYO_BENCH_SHIM_MIB", 1024)
	b := &bench{t: t, path: os.Getenv("CRYO_BENCH_OUT")}
	w := newShimWorkload(t, mib)
	b.shimRunc(w)
	cri := os.Getenv("CRYO_BENCH_SHIM_CRI")
	if cri != "0" {
		b.shimCRI(w)
	}
	if cri == "only" {
		return
	}
	d := harness.StartDaemonWith(t, v, w.gpu)
	w.importInto(d)
	b.shimContainerd(d, w, false)
	b.shimContainerd(d, w, true)
}

// shimWorkload is the container every route runs: its image, command and
// whether it uses the real GPU.
type shimWorkload struct {
	t   *testing.T
	mib int
	gpu bool
	// hostNet: the containers share the host's network namespace (the GPU
	// hosts' default; $CRYO_BENCH_SHIM_HOSTNET=1 or 0 says otherwise). Every
	// restore must then be granted it again: a checkpoint carries no rights.
	hostNet bool
	dir     string
	root    string // the image's root filesystem
	args    []string
	image   string
}

func newShimWorkload(t *testing.T, mib int) *shimWorkload {
	w := &shimWorkload{t: t, mib: mib, dir: t.TempDir(), image: "localhost/cryo/benchshim:test"}
	_, err := os.Stat("/dev/nvidiactl")
	w.gpu = err == nil
	w.hostNet = w.gpu
	if v := os.Getenv("CRYO_BENCH_SHIM_HOSTNET"); v != "" {
		w.hostNet = v == "1"
	}
	if w.gpu {
		w.root = gpuRootfs(t, w.dir)
		w.args = []string{"/bin/cudamem", strconv.Itoa(mib), "100"}
		return w
	}
	w.root = harness.NewRootfs(t, w.dir)
	w.args = []string{"/bin/fakecuda-app", "100", strconv.Itoa(mib * 1024)}
	for _, kv := range harness.FakeDriverEnv(t, "") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // cryo-runc and cryo find the fake driver
	}
	return w
}

func (w *shimWorkload) name() string {
	if w.gpu {
		return "cudamem"
	}
	return "fakecuda-app"
}

// bundle writes a runc bundle of the workload under dir.
func (w *shimWorkload) bundle(dir string) string {
	t := w.t
	bundle := filepath.Join(dir, "bundle")
	if w.gpu {
		gpuRootfs(t, bundle)
		gpuSpec(t, bundle, w.args...)
	} else {
		harness.NewRootfs(t, bundle)
		s := harness.BaseSpec(w.args...)
		harness.GiveStandIns(s, 0) // the fake driver's GPU 0
		harness.WriteSpec(t, bundle, s)
	}
	return bundle
}

func (w *shimWorkload) importInto(d *harness.Daemon) {
	archive := filepath.Join(w.dir, "image.tar")
	harness.BuildImageTarAs(w.t, w.root, archive, w.image, w.args)
	d.Ctr("images", "import", "--all-platforms", archive)
}

// shimRunc: the baseline, cryo-runc checkpoint and restore.
func (b *bench) shimRunc(w *shimWorkload) {
	t := b.t
	dir := t.TempDir()
	c := &harness.RuncContainer{T: t, Runc: harness.CryoBin(t, "cryo-runc"), Root: filepath.Join(dir, "runc-root"), Bundle: w.bundle(dir), ID: "cryo-bench-shim-runc", Log: &testsupport.Buffer{}}
	defer c.Remove()
	c.Start("run", "-d", "--bundle", c.Bundle, c.ID)
	w.WaitTick(c.Log.String, 0, 90*time.Second)
	img := filepath.Join(dir, "img")
	cleanCache(t)
	b.row(w.name(), w.mib, "cryo-runc checkpoint", c.Checkpoint(img).Seconds())
	b.row(w.name(), w.mib, "cryo-runc image bytes", float64(harness.DirBytes(t, img)))
	flushDirty(t)
	n := w.LastTick(c.Log.String())
	start := time.Now()
	c.Restore(img)
	w.WaitTick(c.Log.String, n, 3*time.Minute)
	b.row(w.name(), w.mib, "cryo-runc restore to first output", time.Since(start).Seconds())
	removeAll(t, img) // CRIU has read it: the disk is the next routes'
}

// shimContainerd: checkpoint with `ctr task checkpoint --exit` (into the
// content store, or into an image directory), then restore into a new
// container through the Go client, as `ctr` has no restore from a path.
func (b *bench) shimContainerd(d *harness.Daemon, w *shimWorkload, path bool) {
	t := b.t
	route := "shim content store"
	if path {
		route = "shim image path"
	}
	id := "bench-" + strings.ReplaceAll(route, " ", "-")
	c := w.container(d, id)
	defer d.Remove(id)
	d.StartTaskLogged(c)
	w.WaitTick(func() string { return harness.ReadFile(d.LogPath(id)) }, 0, 90*time.Second)
	cleanCache(t)
	args := []string{"--exit"}
	img := filepath.Join(d.Dir, id+"-img")
	if path {
		args = append(args, "--image-path", img)
	}
	io, mark := readIO(t, d.Cmd.Process.Pid), len(d.Log())
	start := time.Now()
	out, err := d.CtrBinErr(d.CtrWithOptions(), append(append([]string{"task", "checkpoint"}, args...), id)...)
	if err != nil {
		t.Fatalf("ctr task checkpoint %s: %v\n%s\n%s", strings.Join(args, " "), err, out, harness.LastLines(d.Log(), 30))
	}
	b.row(w.name(), w.mib, route+" checkpoint", time.Since(start).Seconds())
	io.rowsSince(b, w, route+" checkpoint")
	b.shimLogRows(d, w, mark, route+" checkpoint", "cryo: checkpoint done", "total_ms", "criu_dump_ms", "cuda_suspend_ms")
	ref := strings.TrimSpace(out) // the checkpoint image's name, without --image-path
	d.WaitStopped(id)
	n := w.LastTick(harness.ReadFile(d.LogPath(id)))
	if !path {
		b.shimImage(d, w, ref, n)
		reg := harness.StartRegistry(t)
		for _, compress := range []bool{false, true} {
			b.shimRunnable(d, w, reg, ref, n, compress)
		}
	}
	flushDirty(t)
	restored := id + "-r"
	defer d.Remove(restored)
	io, mark = readIO(t, d.Cmd.Process.Pid), len(d.Log())
	start = time.Now()
	rc := w.container(d, restored)
	if path {
		d.StartTaskLogged(rc, client.WithRestoreImagePath(img))
	} else {
		d.RestoreTask(ref, restored)
	}
	w.WaitTick(func() string { return harness.ReadFile(d.LogPath(restored)) }, n, 3*time.Minute)
	b.row(w.name(), w.mib, route+" restore to first output", time.Since(start).Seconds())
	io.rowsSince(b, w, route+" restore")
	b.shimLogRows(d, w, mark, route+" restore", "cryo: restore checked", "check_ms")
	b.shimLogRows(d, w, mark, route+" restore", "cryo: restore done", "total_ms")
	_ = os.RemoveAll(img)
}

// cleanCache writes out and drops the page cache before a checkpoint, so
// that no route pays for the writeback or the reclaim of the images that
// the routes before it wrote.
func cleanCache(t *testing.T) {
	if !dropCaches(t) {
		flushDirty(t)
	}
}

// shimImage: `cryo image build --containerd` of a content-store checkpoint
// (zstd fastest), then `cryo image restore --containerd` of it into a new
// container, to its first output (tick > n).
func (b *bench) shimImage(d *harness.Daemon, w *shimWorkload, ref string, n int) {
	t := b.t
	node := harness.NewNode(t, nil)
	at := []string{"--address", d.Socket, "--namespace", harness.TestNamespace}
	img := "localhost/cryo/benchshim-ckpt:1"
	flushDirty(t)
	args := append(append([]string{"image", "build"}, at...), "--containerd", "--level", "fastest", ref, img)
	b.row(w.name(), w.mib, "cryo image build --containerd", harness.Timed(t, node.Env, harness.CryoBin(t, "cryo"), args...).Seconds())
	flushDirty(t)
	id := "bench-cryo-image"
	defer d.Remove(id)
	io, mark := readIO(t, d.Cmd.Process.Pid), len(d.Log())
	start := time.Now()
	args = append(append([]string{"image", "restore"}, at...), "--containerd", "--name", id, "--log", d.LogPath(id))
	if !w.gpu {
		// The fake driver's GPU 0 is a stand-in node, handed over by path.
		args = append(args, "--gpus", harness.StandInNode(t, 0))
	}
	if w.hostNet {
		// The checkpointed container shared the host's network: the
		// restore is refused unless granted it again.
		args = append(args, "--net-host")
	}
	node.Cryo(t, append(args, img)...)
	w.WaitTick(func() string { return harness.ReadFile(d.LogPath(id)) }, n, 3*time.Minute)
	b.row(w.name(), w.mib, "cryo image restore --containerd to first output", time.Since(start).Seconds())
	io.rowsSince(b, w, "cryo image restore --containerd")
	b.shimLogRows(d, w, mark, "cryo image restore --containerd", "cryo: restore checked", "check_ms")
	b.shimLogRows(d, w, mark, "cryo image restore --containerd", "cryo: restore done", "total_ms")
}

// shimRunnable: the Kubernetes route. `cryo image build --runnable
// --containerd` of the content-store checkpoint on the workload's image
// (pushed to a registry on loopback), pushed, pulled into containerd as
// the kubelet's pull does, and a container of it restored to its first
// output (tick > n): pages blobs the shim links (the default), or every
// part compressed (--compress-pages, the layout before). Rows: the build,
// the registry bytes, the pull, the shim's read of the checkpoint from the
// content store, and the restore; the pull is not part of the restore.
func (b *bench) shimRunnable(d *harness.Daemon, w *shimWorkload, reg *harness.ImgRegistry, ref string, n int, compress bool) {
	t := b.t
	route := "runnable (pages blobs)"
	args := []string{}
	if compress {
		route, args = "runnable (compressed parts)", []string{"--compress-pages"}
	}
	base := reg.Addr + "/cryo/benchshim:test"
	d.Ctr("images", "tag", "--force", w.image, base)
	d.Ctr("images", "push", "--plain-http", base)
	node := harness.NewNode(t, nil)
	img := fmt.Sprintf("%s/cryo/benchshim-runnable:%v", reg.Addr, compress)
	at := []string{"--address", d.Socket, "--namespace", harness.TestNamespace}
	flushDirty(t)
	build := append(append(append([]string{"image", "build"}, at...), "--containerd", "--runnable", "--level", "fastest", "--base", base, "--format", "{{.size}}"), args...)
	start := time.Now()
	out := node.Cryo(t, append(build, ref, img)...)
	b.row(w.name(), w.mib, route+" build", time.Since(start).Seconds())
	// The template prints the JSON number, which may come in e-notation.
	if size, err := strconv.ParseFloat(harness.LastLine(out), 64); err == nil {
		b.row(w.name(), w.mib, route+" image bytes with its base", size)
	} else {
		t.Logf("no size in the build's output: %v\n%s", err, out)
	}
	pinned := harness.PinnedRef(img, node.Cryo(t, "image", "push", img))
	start = time.Now()
	d.Ctr("images", "pull", "--plain-http", pinned)
	b.row(w.name(), w.mib, route+" pull", time.Since(start).Seconds())
	flushDirty(t)
	id := "bench-" + strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(route)
	defer d.Remove(id)
	mark := len(d.Log())
	start = time.Now()
	d.StartTaskLogged(d.NewCryoContainer(t, id, pinned, w.args, w.hostNet, w.gpu))
	w.WaitTick(func() string { return harness.ReadFile(d.LogPath(id)) }, n, 3*time.Minute)
	b.row(w.name(), w.mib, route+" restore to first output", time.Since(start).Seconds())
	b.shimLogRows(d, w, mark, route+" restore", "cryo: checkpoint read from containerd's content store", "elapsed_ms")
	b.shimLogRows(d, w, mark, route+" restore", "cryo: restore done", "total_ms")
}

// container creates a container of the workload on the cryo runtime.
func (w *shimWorkload) container(d *harness.Daemon, id string) client.Container {
	return d.NewCryoContainer(w.t, id, w.image, w.args, w.hostNet, w.gpu)
}

// LastTick is the last tick the workload printed in out; a tick that
// reports broken memory fails the test.
func (w *shimWorkload) LastTick(out string) int {
	if w.gpu {
		return harness.LastTick(w.t, out)
	}
	return harness.LastOf(harness.FakeTicks(w.t, w.name(), out))
}

// waitTick waits, polling often, for a tick after n in what get returns.
func (w *shimWorkload) WaitTick(get func() string, n int, timeout time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if w.LastTick(get()) > n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.t.Fatalf("%s printed no tick after %d:\n%s", w.name(), n, harness.Tail(get(), 20))
}

// shimLogRows records the millisecond fields of the shim's last log line
// with msg in containerd's log after its first mark bytes, in seconds.
func (b *bench) shimLogRows(d *harness.Daemon, w *shimWorkload, mark int, what, msg string, fields ...string) {
	line := ""
	for _, l := range strings.Split(d.Log()[mark:], "\n") {
		if strings.Contains(l, msg) {
			line = l
		}
	}
	for _, f := range fields {
		m := regexp.MustCompile(`\b` + f + `=(\d+)`).FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ms, _ := strconv.Atoi(m[1])
		b.row(w.name(), w.mib, fmt.Sprintf("%s: shim %s", what, strings.TrimSuffix(f, "_ms")), float64(ms)/1000)
	}
}

// ioCounts is a process's /proc/PID/io: what containerd itself reads and
// writes (the content store's copies), to tell its share from the shim's.
type ioCounts struct {
	pid int
	v   map[string]int64
}

func readIO(t *testing.T, pid int) ioCounts {
	c := ioCounts{pid: pid, v: map[string]int64{}}
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Logf("no I/O counts of containerd: %v", err)
		return c
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ": ")
		if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
			c.v[k] = n
		}
	}
	return c
}

func (c ioCounts) rowsSince(b *bench, w *shimWorkload, what string) {
	now := readIO(b.t, c.pid)
	for _, k := range []string{"rchar", "wchar"} {
		if _, ok := c.v[k]; ok {
			b.row(w.name(), w.mib, what+": containerd "+k+" bytes", float64(now.v[k]-c.v[k]))
		}
	}
}
