package integration

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/internal/procfs"
)

// The restore log line of cryo's CRIU patch (contrib/criu): a CRIU whose
// log lacks it is stock.
const hugeFillLog = "huge-page fill: "

// patchedCRIU is the CRIU under test: $CRYO_CRIU, else the one `make deps`
// installs (/usr/local/sbin/criu), else criu on PATH (a bundle's).
func patchedCRIU(t testing.TB) string {
	t.Helper()
	return criuAt(t, os.Getenv("CRYO_CRIU"), "/usr/local/sbin/criu", "criu")
}

// stockCRIU is CRIU without cryo's patches, for baselines: $CRYO_CRIU_STOCK,
// else the one `make deps` installs beside the patched one, else
// criu-stock on PATH (a bundle's).
func stockCRIU(t testing.TB) string {
	t.Helper()
	return criuAt(t, os.Getenv("CRYO_CRIU_STOCK"), "/usr/local/libexec/cryo/criu-stock", "criu-stock")
}

func criuAt(t testing.TB, env, installed, name string) string {
	t.Helper()
	for _, p := range []string{env, installed} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("%s not found (%s): run `make deps` (contrib/install-deps.sh)", name, installed)
	return ""
}

// thpMode is the host's transparent huge page mode: always, madvise or never.
func thpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	s := string(b)
	if err != nil || !strings.Contains(s, "[") {
		return "never"
	}
	return s[strings.Index(s, "[")+1 : strings.Index(s, "]")]
}

// hugeProc is testdata/hugefill.c running: regions by name, [start, end).
type hugeProc struct {
	*bareProc
	regions map[string][2]uint64
}

// startHugefill builds testdata/hugefill.c and runs it with a filled region
// of mib MiB (plus 192 MiB of sparse, NOHUGEPAGE and partly filled ones).
func startHugefill(t *testing.T, mib int) *hugeProc {
	t.Helper()
	requireRoot(t)
	bin := filepath.Join(t.TempDir(), "hugefill")
	// Relative: tests run in the package directory, here and from a bundle.
	run(t, time.Minute, nil, "gcc", "-O2", "-o", bin, filepath.Join("testdata", "hugefill.c"))
	p := &hugeProc{bareProc: startBare(t, nil, nil, bin+" "+strconv.Itoa(mib)+" regions </dev/null")}
	waitFor(t, 2*time.Minute, "hugefill's regions", func() bool {
		p.regions = readRegions(filepath.Join(p.dir, "regions"))
		return len(p.regions) == 4
	})
	return p
}

func readRegions(path string) map[string][2]uint64 {
	b, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(string(b), "\n") {
		return nil
	}
	m := map[string][2]uint64{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			return nil
		}
		s, err1 := strconv.ParseUint(f[1], 16, 64)
		e, err2 := strconv.ParseUint(f[2], 16, 64)
		if err1 != nil || err2 != nil {
			return nil
		}
		m[f[0]] = [2]uint64{s, e}
	}
	return m
}

// sums is the sha256 of each region's memory, read through /proc/PID/mem.
func (p *hugeProc) sums(t testing.TB) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(p.pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	for name, r := range p.regions {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, int64(r[0]), int64(r[1]-r[0]))); err != nil {
			t.Fatalf("reading %s of pid %d: %v", name, p.pid, err)
		}
		out[name] = hex.EncodeToString(h.Sum(nil))
	}
	return out
}

// mapsLines is the number of memory regions of the process.
func (p *hugeProc) mapsLines(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// smapsEntry is what smaps says about one region.
type smapsEntry struct {
	vmFlags   []string
	anonHugeK int
}

func (e smapsEntry) has(flag string) bool {
	for _, f := range e.vmFlags {
		if f == flag {
			return true
		}
	}
	return false
}

// smaps is the smaps entry of each named region (found by its start).
func (p *hugeProc) smaps(t testing.TB) map[string]smapsEntry {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(p.pid) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byStart := map[uint64]string{}
	for name, r := range p.regions {
		byStart[r[0]] = name
	}
	out := map[string]smapsEntry{}
	cur, e := "", smapsEntry{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		fields := strings.Fields(l)
		switch {
		case strings.HasPrefix(l, "AnonHugePages:") && len(fields) > 1:
			e.anonHugeK, _ = strconv.Atoi(fields[1])
		case strings.HasPrefix(l, "VmFlags:"):
			e.vmFlags = fields[1:]
			if cur != "" {
				out[cur] = e
			}
			cur, e = "", smapsEntry{}
		case len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			start, _ := strconv.ParseUint(strings.SplitN(fields[0], "-", 2)[0], 16, 64)
			cur = byStart[start]
		}
	}
	if len(out) != len(p.regions) {
		t.Fatalf("smaps of pid %d lacks some of %v", p.pid, p.regions)
	}
	return out
}

// criuDump dumps the process into img with criu and waits until it is gone.
func (p *hugeProc) criuDump(t testing.TB, criu, img string) {
	t.Helper()
	run(t, 5*time.Minute, nil, criu, "dump", "-t", strconv.Itoa(p.pid), "-D", img, "-o", filepath.Join(img, "dump.log"), "-v4")
	p.waitGone(t)
}

// criuRestore restores img detached with criu (env added to its
// environment) and returns how long criu took and its log.
func criuRestore(t testing.TB, criu, img string, env []string) (time.Duration, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "restore.log")
	start := time.Now()
	out, err := runErr(5*time.Minute, env, criu, "restore", "-D", img, "-d", "-o", log, "-v4")
	d := time.Since(start)
	b, _ := os.ReadFile(log)
	if err != nil {
		t.Fatalf("%s restore: %v\n%s\n%s", criu, err, out, tail(string(b), 30))
	}
	return d, string(b)
}

// kill ends the (restored) process and waits until it is reaped: a
// restore needs its pid free.
func (p *hugeProc) kill(t testing.TB) {
	t.Helper()
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	p.waitGone(t)
}

func (p *hugeProc) waitGone(t testing.TB) {
	t.Helper()
	waitFor(t, 2*time.Minute, "pid "+strconv.Itoa(p.pid)+" to be reaped", func() bool { return !procfs.Exists(p.pid) })
}

// loggingCRIU is a `criu` in a directory of its own that records each
// command line, with the name of the process that ran it, and runs the
// patched CRIU: given as CRYO_CRIU, it shows which CRIU runc really ran.
type loggingCRIU struct{ path, calls string }

func newLoggingCRIU(t *testing.T) loggingCRIU {
	t.Helper()
	dir := t.TempDir()
	c := loggingCRIU{path: filepath.Join(dir, "criu"), calls: filepath.Join(dir, "calls")}
	script := "#!/bin/sh\necho \"$(cat /proc/$PPID/comm): $*\" >> " + c.calls + "\nexec " + patchedCRIU(t) + " \"$@\"\n"
	if err := os.WriteFile(c.path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// runcSwrks counts the CRIU service sessions (dumps, restores, version
// queries) that runc started through it.
func (c loggingCRIU) runcSwrks() int {
	b, _ := os.ReadFile(c.calls)
	return strings.Count(string(b), "runc: swrk")
}
