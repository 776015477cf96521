package integration

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/testsupport"
)

// runcContainer is a GPU container run by cryo-runc with its stdio on a pipe
// that the test reads, as containerd and Podman do (CRIU cannot dump stdio
// that points at host files outside the container).
type runcContainer struct {
	t      *testing.T
	runc   string // cryo-runc, or the raw runc for the baseline
	root   string // runc --root
	bundle string
	id     string
	log    *testsupport.Buffer
	criu   string // runc --criu: the benchmarks' raw baseline runs stock CRIU
	runLog string // runc --log: the benchmarks read cryo-runc's restore steps there
}

// globals are runc's global flags for this container: its state root and,
// where set, the CRIU binary and the log file.
func (c *runcContainer) globals() []string {
	g := []string{"--root", c.root}
	if c.criu != "" {
		g = append(g, "--criu", c.criu)
	}
	if c.runLog != "" {
		g = append(g, "--log", c.runLog)
	}
	return g
}

func newGPUContainer(t *testing.T, runc, id string) *runcContainer {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	gpuRootfs(t, bundle)
	gpuSpec(t, bundle, "/bin/cudamem", gpuMiB(), "100")
	c := &runcContainer{t: t, runc: runc, root: filepath.Join(dir, "runc-root"), bundle: bundle, id: id, log: &testsupport.Buffer{}}
	t.Cleanup(func() {
		_, _ = runErr(30*time.Second, nil, runc, "--root", c.root, "delete", "--force", c.id)
	})
	return c
}

// start runs `runc run -d` or `runc restore -d` with stdio on a fresh pipe.
func (c *runcContainer) start(args ...string) time.Duration {
	c.t.Helper()
	cmd := exec.Command(c.runc, append(c.globals(), args...)...)
	cmd.Dir = c.bundle
	r, w, err := os.Pipe()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, w, w
	go func() { _, _ = io.Copy(c.log, r); r.Close() }()
	start := time.Now()
	err = cmd.Run()
	d := time.Since(start)
	w.Close()
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", filepath.Base(c.runc), strings.Join(args, " "), err, c.log.String())
	}
	return d
}

func (c *runcContainer) pid() int {
	c.t.Helper()
	out := run(c.t, 30*time.Second, nil, c.runc, "--root", c.root, "state", c.id)
	var st struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		c.t.Fatalf("runc state: %v: %s", err, out)
	}
	return st.Pid
}

func (c *runcContainer) ticksAfter(n int, what string) int {
	return waitTicks(c.t, c.log.String, n, what)
}

// TestGPURuncCheckpointRestore: cryo-runc checkpoint then restore; a restore
// with an explicit GPU UUID map onto the same GPU; a leave-running
// checkpoint; and the raw runc + driver sequence side by side.
func TestGPURuncCheckpointRestore(t *testing.T) {
	gpuOrSkip(t)
	wrap := cryoBin(t, "cryo-runc")
	c := newGPUContainer(t, wrap, "cryo-gpu-runc")
	c.start("run", "-d", "--bundle", c.bundle, c.id)
	c.ticksAfter(2, "first ticks")

	img := filepath.Join(t.TempDir(), "img")
	report(t, "cryo-runc checkpoint", timed(t, nil, wrap, "--root", c.root, "checkpoint", "--image-path", img, c.id))
	n := lastTick(t, c.log.String())
	report(t, "cryo-runc restore", c.start("restore", "-d", "--image-path", img, "--bundle", c.bundle, c.id))
	n = c.ticksAfter(n, "ticks after restore")
	t.Logf("restored; tick %d", n)

	// Leave-running: the container goes on, and its CUDA state is resumed.
	img2 := filepath.Join(t.TempDir(), "img2")
	atCkpt := lastTick(t, c.log.String())
	report(t, "cryo-runc checkpoint --leave-running", timed(t, nil, wrap, "--root", c.root, "checkpoint", "--leave-running", "--image-path", img2, c.id))
	c.ticksAfter(lastTick(t, c.log.String()), "ticks after a leave-running checkpoint")

	// Restore the leave-running image onto the same GPU through an explicit
	// UUID map (the driver's gpuPairs), after stopping the original.
	run(t, time.Minute, nil, wrap, "--root", c.root, "kill", c.id, "KILL")
	waitFor(t, 30*time.Second, "the container to stop", func() bool {
		out, _ := runErr(10*time.Second, nil, wrap, "--root", c.root, "state", c.id)
		return strings.Contains(out, `"stopped"`) || !strings.Contains(out, c.id)
	})
	run(t, time.Minute, nil, wrap, "--root", c.root, "delete", "--force", c.id)
	uuid := firstGPUUUID(t)
	c.log = &testsupport.Buffer{}
	os.Setenv("CRYO_GPU_MAP", uuid+"="+uuid)
	c.start("restore", "-d", "--image-path", img2, "--bundle", c.bundle, c.id)
	os.Unsetenv("CRYO_GPU_MAP")
	c.ticksAfter(atCkpt, "ticks after a restore with a GPU UUID map")
	runcBaseline(t)
}

// runcBaseline times the raw sequence: the driver's suspend of the
// container's process, then plain runc checkpoint; plain runc restore, then
// the driver's resume.
func runcBaseline(t *testing.T) {
	cryo := cryoBin(t, "cryo")
	runc := rawRunc()
	c := newGPUContainer(t, runc, "cryo-gpu-raw")
	c.start("run", "-d", "--bundle", c.bundle, c.id)
	c.ticksAfter(2, "raw first ticks")
	pid := strconv.Itoa(c.pid())
	img := filepath.Join(t.TempDir(), "raw-img")
	d := timed(t, nil, cryo, "cuda", "suspend", pid)
	d += timed(t, nil, runc, "--root", c.root, "checkpoint", "--image-path", img, c.id)
	report(t, "raw checkpoint (driver + runc)", d)
	n := lastTick(t, c.log.String())
	d = c.start("restore", "-d", "--image-path", img, "--bundle", c.bundle, c.id)
	d += timed(t, nil, cryo, "cuda", "resume", strconv.Itoa(c.pid()))
	report(t, "raw restore (runc + driver)", d)
	c.ticksAfter(n, "raw ticks after restore")
}

// firstGPUUUID is the UUID of GPU 0, from nvidia-smi.
func firstGPUUUID(t *testing.T) string {
	out := run(t, 30*time.Second, nil, "nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader")
	return strings.TrimSpace(strings.Split(out, "\n")[0])
}
