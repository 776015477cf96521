package gpu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/testsupport"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// Helpers of the GPU workload tests (contrib/workloads): a container whose
// Python and PyTorch are the GPU host's own, bind-mounted read-only into a
// minimal root filesystem (docs/gpu-workloads.md), and small clients.

// workloadsDir is contrib/workloads: $CRYO_WORKLOADS, else found from the
// working directory (the test binary runs in integration/), else the source.
func workloadsDir(t testing.TB) string {
	t.Helper()
	cands := []string{os.Getenv("CRYO_WORKLOADS"), "../../contrib/workloads", filepath.Join(harness.RepoRoot(), "contrib/workloads")}
	for _, d := range cands {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "torchtrain/train.py")); err == nil {
			abs, _ := filepath.Abs(d)
			return abs
		}
	}
	t.Fatalf("contrib/workloads not found: set CRYO_WORKLOADS")
	return ""
}

// hostPython describes the host's Python with PyTorch.
type hostPython struct {
	exe      string   // as called, e.g. /opt/torch/.venv/bin/python3
	prefixes []string // sys.prefix, sys.base_prefix, the real executable's directory
}

var (
	pyOnce sync.Once
	pyInfo *hostPython
	pyErr  string
)

// torchPython returns the host's Python with PyTorch and safetensors
// ($CRYO_PYTHON, else /opt/torch/.venv/bin/python3, else python3), and skips
// the test where there is none (or no GPU).
func torchPython(t *testing.T) *hostPython {
	t.Helper()
	gpuOrSkip(t)
	pyOnce.Do(func() {
		exe := os.Getenv("CRYO_PYTHON")
		if exe == "" {
			exe = "/opt/torch/.venv/bin/python3"
			if _, err := os.Stat(exe); err != nil {
				exe, _ = exec.LookPath("python3")
			}
		}
		if exe == "" {
			pyErr = "no python3"
			return
		}
		out, err := harness.RunErr(2*time.Minute, nil, exe, "-c",
			"import os, sys, torch, safetensors; print(sys.prefix); print(sys.base_prefix); print(os.path.dirname(os.path.realpath(sys.executable))); print(torch.__version__, torch.cuda.is_available())")
		if err != nil {
			pyErr = fmt.Sprintf("%s: %v: %s", exe, err, harness.Tail(out, 3))
			return
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 4 || !strings.HasSuffix(lines[len(lines)-1], "True") {
			pyErr = fmt.Sprintf("%s: PyTorch sees no GPU: %s", exe, out)
			return
		}
		pyInfo = &hostPython{exe: exe, prefixes: lines[len(lines)-4 : len(lines)-1]}
	})
	if pyInfo == nil {
		t.Skipf("no PyTorch with safetensors on this GPU host (%s): the PyTorch workloads need it", pyErr)
	}
	return pyInfo
}

// hostBinds are the read-only bind mounts that give a container the host's
// Python: /usr, the top directory of every Python prefix outside /usr (e.g.
// /opt/torch), the driver's library directory, and every mount below those
// (a bind mount is not recursive, and CRIU wants each mount declared: runc
// passes every bind mount of the spec to CRIU as an external mount).
func hostBinds(t *testing.T, py *hostPython) []string {
	t.Helper()
	roots := map[string]bool{"/usr": true}
	for _, p := range append([]string{harness.NvidiaLibDir(t)}, py.prefixes...) {
		p = filepath.Clean(p)
		if p == "/usr" || strings.HasPrefix(p, "/usr/") {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		top := "/" + parts[0]
		if len(parts) > 1 {
			top += "/" + parts[1]
		}
		roots[top] = true
	}
	binds := map[string]bool{}
	for r := range roots {
		binds[r] = true
	}
	for _, mp := range mountPoints(t) {
		for r := range roots {
			if strings.HasPrefix(mp, r+"/") {
				binds[mp] = true
			}
		}
	}
	list := make([]string, 0, len(binds))
	for b := range binds {
		list = append(list, b)
	}
	// Parents before children.
	sort.Slice(list, func(i, j int) bool {
		if ci, cj := strings.Count(list[i], "/"), strings.Count(list[j], "/"); ci != cj {
			return ci < cj
		}
		return list[i] < list[j]
	})
	return list
}

// mountPoints lists this mount namespace's mount points.
func mountPoints(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 4 {
			mps = append(mps, strings.ReplaceAll(fs[4], `\040`, " "))
		}
	}
	return mps
}

// pyContainer builds a runc bundle whose root filesystem is a few
// directories and symbolic links, with the host's /usr, Python and driver
// libraries bind-mounted read-only, the files of files (rootfs path → host
// path) copied in, the extra mounts added, and the workload args; and
// returns it as a RuncContainer run by runc (cryo-runc or plain runc).
func pyContainer(t *testing.T, runc, id string, py *hostPython, files map[string]string, extra []specs.Mount, args ...string) *harness.RuncContainer {
	t.Helper()
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	root := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"tmp", "proc", "sys", "dev", "etc", "root", "app"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := newGPUSpec(t, args...)
	// /bin, /lib, /lib64, /sbin: symbolic links into /usr on a merged-/usr
	// host (Ubuntu 24.04), else bind mounts of their own.
	for _, name := range []string{"bin", "sbin", "lib", "lib64", "lib32", "libx32"} {
		fi, err := os.Lstat("/" + name)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink("/" + name)
			if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
		case fi.IsDir():
			s.Mounts = append(s.Mounts, roBind("/"+name, "/"+name))
		}
	}
	for _, b := range hostBinds(t, py) {
		if err := os.MkdirAll(filepath.Join(root, b), 0o755); err != nil {
			t.Fatal(err)
		}
		s.Mounts = append(s.Mounts, roBind(b, b))
	}
	for _, m := range extra {
		if err := os.MkdirAll(filepath.Join(root, m.Destination), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.Mounts = append(s.Mounts, extra...)
	harness.WriteFile(t, filepath.Join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")
	harness.WriteFile(t, filepath.Join(root, "etc/group"), "root:x:0:\n")
	harness.WriteFile(t, filepath.Join(root, "etc/hosts"), "127.0.0.1 localhost\n")
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		harness.CopyFile(t, "/etc/ld.so.cache", filepath.Join(root, "etc/ld.so.cache"), 0o644)
	}
	for dst, src := range files {
		harness.CopyFile(t, src, filepath.Join(root, dst), 0o755)
	}
	s.Process.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=" + harness.NvidiaLibDir(t), "HOME=/root", "USER=root",
		"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "CUBLAS_WORKSPACE_CONFIG=:4096:8",
	}
	harness.WriteSpec(t, bundle, s)
	c := &harness.RuncContainer{T: t, Runc: runc, Root: filepath.Join(dir, "runc-root"), Bundle: bundle, ID: id, Log: &testsupport.Buffer{}}
	t.Cleanup(func() { c.Remove() })
	return c
}

func roBind(src, dst string) specs.Mount {
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"bind", "ro", "nosuid"}}
}

var stepRe = regexp.MustCompile(`(?m)^step (\d+) loss=(\S+) verify=(OK|BAD)`)

// trainSteps parses torchtrain's output into step → loss (hex), failing on
// a verify=BAD or a step printed twice with two losses.
func trainSteps(t *testing.T, out string) map[int]string {
	t.Helper()
	steps := map[int]string{}
	for _, m := range stepRe.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		if m[3] != "OK" {
			t.Fatalf("torchtrain reports broken state at step %d:\n%s", n, harness.Tail(out, 10))
		}
		if old, ok := steps[n]; ok && old != m[2] {
			t.Fatalf("step %d printed twice with losses %s and %s", n, old, m[2])
		}
		steps[n] = m[2]
	}
	return steps
}

func lastStep(steps map[int]string) int {
	n := 0
	for s := range steps {
		if s > n {
			n = s
		}
	}
	return n
}

// compareLosses checks steps 1..upto of got against the reference, bit for
// bit, and returns the first difference.
func compareLosses(got, ref map[int]string, upto int) error {
	for s := 1; s <= upto; s++ {
		g, ok := got[s]
		if !ok {
			return fmt.Errorf("step %d missing", s)
		}
		if r, ok := ref[s]; !ok {
			return fmt.Errorf("step %d not in the reference", s)
		} else if g != r {
			return fmt.Errorf("step %d: loss %s, the uninterrupted run had %s", s, g, r)
		}
	}
	return nil
}

// ask sends one request to the inference server's HTTP API at addr
// (HOST:PORT) and returns its answer as one line: "infer SEED" -> POST
// /v1/infer -> "answer seed=SEED sum=HEX"; "verify" -> GET /v1/verify ->
// "verify=OK" or "verify=BAD layer=I". Each request has its own connection
// (no keep-alive): an idle connection left open would be an established
// TCP connection at the next checkpoint.
func ask(addr string, req string, timeout time.Duration) (string, error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	var resp *http.Response
	var err error
	switch f := strings.Fields(req); {
	case len(f) == 2 && f[0] == "infer":
		resp, err = c.Post("http://"+addr+"/v1/infer", "application/json", strings.NewReader(`{"seed": `+f[1]+`}`))
	case req == "verify":
		resp, err = c.Get("http://" + addr + "/v1/verify")
	default:
		return "", fmt.Errorf("unknown request %q", req)
	}
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var a struct {
		Seed   *int
		Sum    string
		Verify string
		Layer  int
		Error  string
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return "", fmt.Errorf("%s: HTTP %d: %w", req, resp.StatusCode, err)
	}
	switch {
	case a.Error != "":
		return "", fmt.Errorf("%s: HTTP %d: %s", req, resp.StatusCode, a.Error)
	case a.Verify == "BAD":
		return fmt.Sprintf("verify=BAD layer=%d", a.Layer), nil
	case a.Verify != "":
		return "verify=" + a.Verify, nil
	case a.Seed != nil:
		return fmt.Sprintf("answer seed=%d sum=%s", *a.Seed, a.Sum), nil
	}
	return "", fmt.Errorf("%s: HTTP %d: no answer", req, resp.StatusCode)
}

// firstAnswer polls the server until it answers req, and returns the answer.
func firstAnswer(t *testing.T, addr string, req string, timeout time.Duration, log func() string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if a, err := ask(addr, req, 60*time.Second); err == nil && a != "" {
			return a
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no answer to %q on %s within %s:\n%s", req, addr, timeout, harness.Tail(log(), 30))
	return ""
}

// serveAddr is a free TCP port on the loopback for the inference server's
// HTTP API. The container shares the host's network namespace, as a
// host-network pod does, so the test reaches it from outside the container.
func serveAddr(t *testing.T) string {
	t.Helper()
	return testsupport.FreeAddr(t)
}

// serveWeights generates torchserve's weights once, cached under
// $CRYO_WEIGHTS_DIR (default /tmp/cryo-weights), and returns the file.
func serveWeights(t *testing.T, py *hostPython, gib int) string {
	t.Helper()
	dir := weightsDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("model-%dgib.safetensors", gib))
	script := filepath.Join(workloadsDir(t), "torchserve/serve.py")
	out := harness.Run(t, 5*time.Minute, nil, py.exe, script, "--gen", path, "--gib", strconv.Itoa(gib))
	t.Logf("%s", strings.TrimSpace(out))
	return path
}

// weightsDir is where the servers' random weights are cached across runs:
// $CRYO_WEIGHTS_DIR, default /tmp/cryo-weights.
func weightsDir() string {
	if dir := os.Getenv("CRYO_WEIGHTS_DIR"); dir != "" {
		return dir
	}
	return "/tmp/cryo-weights"
}

// llmModel builds llmserve's random model of gib GiB once, cached under
// $CRYO_WEIGHTS_DIR (default /tmp/cryo-weights), and returns its folder.
func llmModel(t *testing.T, py *hostPython, gib int) string {
	t.Helper()
	path := filepath.Join(weightsDir(), fmt.Sprintf("llm-%dgib", gib))
	script := filepath.Join(workloadsDir(t), "llmserve/llmserve.py")
	out := harness.Run(t, 10*time.Minute, nil, py.exe, script, "--gen", path, "--weights-gib", strconv.Itoa(gib))
	t.Logf("%s", strings.TrimSpace(out))
	return path
}

// fdCount is the number of open file descriptors of pid.
func fdCount(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// userProcs lists the host's user-space processes (those with a command
// line) as "pid name".
func userProcs() map[int]string {
	procs := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(cmd) == 0 {
			continue
		}
		procs[pid] = strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")
	}
	return procs
}

// envInt is an integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
