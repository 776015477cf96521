package criu

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"golang.org/x/sys/unix"
)

// zdtmGroup is the tests of one "[OPTIONS]" section of the subset file.
type zdtmGroup struct {
	opts     []string
	tests    []string
	cryoOnly map[string]bool // tests that stock CRIU cannot finish
}

// zdtmRun is one zdtm.py run: the result of each test in each flavor
// ("zdtm/static/maps02 h": PASS or FAIL) and the output about each.
type zdtmRun struct {
	result map[string]string
	output map[string]string
	all    string
}

// requireZdtm is the CRIU source tree with the suite built that `make deps`
// keeps: $CRYO_ZDTM_DIR, else $CRYO_DEPS/criu-zdtm. Absent, the test skips
// where install-deps recorded why it could not build it, and fails
// otherwise.
func requireZdtm(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CRYO_ZDTM_DIR")
	if dir == "" {
		dir = filepath.Join(harness.DepsDir(), "criu-zdtm")
	}
	if _, err := os.Stat(filepath.Join(dir, "test", "zdtm.py")); err == nil {
		return dir
	}
	if why, err := os.ReadFile(dir + ".failed"); err == nil {
		t.Skipf("no CRIU test suite in %s: install-deps could not build it:\n%s", dir, why)
	}
	t.Fatalf("no CRIU test suite in %s: run `make deps` (contrib/install-deps.sh, install_criu_zdtm)", dir)
	return ""
}

func readZdtmSubset(t *testing.T, path string) []zdtmGroup {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var groups []zdtmGroup
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			groups = append(groups, zdtmGroup{opts: strings.Fields(line[1 : len(line)-1]), cryoOnly: map[string]bool{}})
		case len(groups) == 0:
			t.Fatalf("%s: test %q before any [OPTIONS] line", path, line)
		default:
			g, f := &groups[len(groups)-1], strings.Fields(line)
			g.tests = append(g.tests, f[0])
			if len(f) > 1 && f[1] == "cryo-only" {
				g.cryoOnly[f[0]] = true
			} else if len(f) > 1 {
				t.Fatalf("%s: %q: want a test and nothing or cryo-only after it", path, line)
			}
		}
	}
	return groups
}

// hasCapSysResource tells whether this process may read the rlimits of a
// task of another uid: zdtm's tests run as uid 18943 unless marked suid,
// and CRIU reads their rlimits with prlimit.
func hasCapSysResource() bool {
	b, _ := os.ReadFile("/proc/self/status")
	m := regexp.MustCompile(`CapEff:\s*([0-9a-f]+)`).FindSubmatch(b)
	if m == nil {
		return false
	}
	caps, err := strconv.ParseUint(string(m[1]), 16, 64)
	return err == nil && caps&(1<<unix.CAP_SYS_RESOURCE) != 0
}

var (
	zdtmRunLine    = regexp.MustCompile(`^=+ Run (zdtm/\S+) in (\S+) =+$`)
	zdtmResultLine = regexp.MustCompile(`Test (zdtm/\S+) (PASS|FAIL)`)
)

// parseZdtm reads zdtm.py's output: each test's result in each flavor.
func parseZdtm(out string) zdtmRun {
	r := zdtmRun{result: map[string]string{}, output: map[string]string{}, all: out}
	var key string
	var buf strings.Builder
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := zdtmRunLine.FindStringSubmatch(line); m != nil {
			key = m[1] + " " + m[2]
			buf.Reset()
		}
		buf.WriteString(line + "\n")
		if m := zdtmResultLine.FindStringSubmatch(line); m != nil && key != "" && strings.HasPrefix(key, m[1]+" ") {
			r.result[key] = m[2]
			r.output[key] = buf.String()
		}
	}
	return r
}

// runZdtm runs one group with criu, in a copy of the tree of its own (the
// suite writes its dumps and outputs there), and returns its results.
func runZdtm(t *testing.T, tree, criu, name string, idx int, g zdtmGroup) zdtmRun {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "criu")
	if out, err := exec.Command("cp", "-a", tree, dir).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v\n%s", tree, err, out)
	}
	cg := fmt.Sprintf("cryo-zdtm-%d-%s-%d", os.Getpid(), name, idx)
	// A frozen task dies of SIGKILL only once thawed.
	thaw := func() {
		_ = os.WriteFile(filepath.Join("/sys/fs/cgroup/freezer", cg, "freezer.state"), []byte("THAWED"), 0o644)
		_ = os.WriteFile(filepath.Join("/sys/fs/cgroup", cg, "cgroup.freeze"), []byte("0"), 0o644)
	}
	t.Cleanup(func() {
		thaw()
		for _, p := range []string{filepath.Join("/sys/fs/cgroup/freezer", cg), filepath.Join("/sys/fs/cgroup", cg)} {
			for i := 0; i < 50; i++ {
				if err := os.Remove(p); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	var names []string
	for _, tc := range g.tests {
		if name == "stock" && g.cryoOnly[tc] {
			continue
		}
		names = append(names, regexp.QuoteMeta(tc))
	}
	args := []string{"zdtm.py", "run", "-T", "(" + strings.Join(names, "|") + ")$", "--keep-going", "--ignore-taint",
		"--keep-img", "never", "--criu-bin", criu}
	for _, o := range g.opts {
		args = append(args, strings.ReplaceAll(o, "{cg}", cg))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", args...)
	cmd.Dir = filepath.Join(dir, "test")
	// Debian's python3 (the suite's modules: yaml, protobuf), for zdtm.py
	// and for the copies of itself it starts in each test's namespaces.
	cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	if !hasCapSysResource() {
		cmd.Env = append(cmd.Env, "ZDTM_ROOT_TESTS=1")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that a run that passes its deadline takes
	// its tests with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		thaw()
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Errorf("zdtm.py (%s, %v) passed its deadline:\n%s", name, g.opts, harness.Tail(out.String(), 30))
	}
	r := parseZdtm(out.String())
	if len(r.result) == 0 {
		t.Fatalf("zdtm.py (%s, %v) ran no test: %v\n%s", name, g.opts, err, harness.Tail(out.String(), 30))
	}
	return r
}

// TestCRIUZdtm runs the tests of contrib/criu/zdtm-subset.txt (memory,
// threads, stopped tasks and the cgroup freezer's modes) from CRIU's own
// suite with cryo's CRIU and, at the same time, with stock CRIU, each from
// a copy of the suite's tree, and fails where a test passes with stock
// CRIU and fails with cryo's, or where maps02 (a region's advice kept
// through a dump of its zero pages) fails with cryo's. A test that fails
// with both is logged: it is this machine's, not cryo's. Where this test
// lacks CAP_SYS_RESOURCE, CRIU cannot read the rlimits of a task of
// another uid, so the suite's tests all run as root (ZDTM_ROOT_TESTS,
// contrib/criu/zdtm-root-tests.patch). It cannot stay under 2 minutes:
// 4m33s on the 2-vCPU dev VM under a load average of 13 (each build runs
// 79 test runs, each a dump and a restore).
func TestCRIUZdtm(t *testing.T) {
	harness.RequireRoot(t)
	tree := requireZdtm(t)
	builds := map[string]string{"cryo": harness.PatchedCRIU(t), "stock": harness.StockCRIU(t)}
	if !hasCapSysResource() {
		t.Logf("no CAP_SYS_RESOURCE: the suite's tests run as root (ZDTM_ROOT_TESTS=1)")
	}
	start := time.Now()
	for i, g := range readZdtmSubset(t, filepath.Join(harness.RepoRoot(), "contrib", "criu", "zdtm-subset.txt")) {
		runs := map[string]zdtmRun{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for name, criu := range builds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := runZdtm(t, tree, criu, name, i, g)
				mu.Lock()
				runs[name] = r
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		compareZdtm(t, g, runs["cryo"], runs["stock"])
	}
	t.Logf("zdtm subset on both CRIUs: %s", time.Since(start).Round(time.Second))
}

// compareZdtm fails for each test and flavor that passes with stock CRIU
// and fails (or does not run) with cryo's.
func compareZdtm(t *testing.T, g zdtmGroup, cryo, stock zdtmRun) {
	t.Helper()
	var pass, both int
	for key, want := range stock.result {
		got, ok := cryo.result[key]
		switch {
		case want == "PASS" && got != "PASS":
			t.Errorf("%v %s: passes with stock CRIU, %q with cryo's:\n%s", g.opts, key, got, harness.Tail(cryo.output[key], 25))
		case want == "FAIL" && got == "FAIL":
			both++
			t.Logf("%v %s fails with both CRIUs:\n%s", g.opts, key, harness.Tail(stock.output[key], 8))
		case ok && got == "PASS":
			pass++
		}
	}
	for key, got := range cryo.result {
		test := strings.Fields(key)[0]
		if (test == "zdtm/static/maps02" || g.cryoOnly[test]) && got != "PASS" {
			t.Errorf("%v %s fails with cryo's CRIU:\n%s", g.opts, key, harness.Tail(cryo.output[key], 25))
		}
	}
	for test := range g.cryoOnly {
		if !hasZdtmResult(cryo, test) {
			t.Errorf("%v %s did not run with cryo's CRIU", g.opts, test)
		}
	}
	t.Logf("%v: %d test runs pass with both CRIUs, %d fail with both", g.opts, pass, both)
}

func hasZdtmResult(r zdtmRun, test string) bool {
	for key := range r.result {
		if strings.HasPrefix(key, test+" ") {
			return true
		}
	}
	return false
}
