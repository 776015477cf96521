package harness

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

// PatchedCRIU is the CRIU under test: $CRYO_CRIU, else the one `make deps`
// installs (/usr/local/sbin/criu), else criu on PATH (a bundle's).
func PatchedCRIU(t testing.TB) string {
	t.Helper()
	return criuAt(t, os.Getenv("CRYO_CRIU"), "/usr/local/sbin/criu", "criu")
}

// StockCRIU is CRIU without cryo's patches, for baselines: $CRYO_CRIU_STOCK,
// else the one `make deps` installs beside the patched one, else
// criu-stock on PATH (a bundle's).
func StockCRIU(t testing.TB) string {
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

// ThpMode is the host's transparent huge page mode: always, madvise or never.
func ThpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	s := string(b)
	if err != nil || !strings.Contains(s, "[") {
		return "never"
	}
	return s[strings.Index(s, "[")+1 : strings.Index(s, "]")]
}

// HugeProc is testdata/hugefill.c running: regions by name, [start, end).
type HugeProc struct {
	*BareProc
	Regions map[string][2]uint64
}

// StartHugefill builds testdata/hugefill.c and runs it with a filled region
// of mib MiB (plus 192 MiB of sparse, NOHUGEPAGE and partly filled ones).
func StartHugefill(t *testing.T, mib int) *HugeProc {
	t.Helper()
	RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "hugefill")
	// Relative: tests run in the package directory, here and from a bundle.
	Run(t, time.Minute, nil, "gcc", "-O2", "-o", bin, filepath.Join("../testdata", "hugefill.c"))
	p := &HugeProc{BareProc: StartBare(t, nil, nil, bin+" "+strconv.Itoa(mib)+" regions </dev/null")}
	WaitFor(t, 2*time.Minute, "hugefill's regions", func() bool {
		p.Regions = ReadRegions(filepath.Join(p.Dir, "regions"))
		return len(p.Regions) == 4
	})
	return p
}

func ReadRegions(path string) map[string][2]uint64 {
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
func (p *HugeProc) Sums(t testing.TB) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(p.PID) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	for name, r := range p.Regions {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, int64(r[0]), int64(r[1]-r[0]))); err != nil {
			t.Fatalf("reading %s of pid %d: %v", name, p.PID, err)
		}
		out[name] = hex.EncodeToString(h.Sum(nil))
	}
	return out
}

// mapsLines is the number of memory regions of the process.
func (p *HugeProc) MapsLines(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// SmapsEntry is what smaps says about one region.
type SmapsEntry struct {
	VmFlags   []string
	AnonHugeK int
}

func (e SmapsEntry) Has(flag string) bool {
	for _, f := range e.VmFlags {
		if f == flag {
			return true
		}
	}
	return false
}

// smaps is the smaps entry of each named region (found by its start).
func (p *HugeProc) Smaps(t testing.TB) map[string]SmapsEntry {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(p.PID) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byStart := map[uint64]string{}
	for name, r := range p.Regions {
		byStart[r[0]] = name
	}
	out := map[string]SmapsEntry{}
	cur, e := "", SmapsEntry{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		fields := strings.Fields(l)
		switch {
		case strings.HasPrefix(l, "AnonHugePages:") && len(fields) > 1:
			e.AnonHugeK, _ = strconv.Atoi(fields[1])
		case strings.HasPrefix(l, "VmFlags:"):
			e.VmFlags = fields[1:]
			if cur != "" {
				out[cur] = e
			}
			cur, e = "", SmapsEntry{}
		case len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			start, _ := strconv.ParseUint(strings.SplitN(fields[0], "-", 2)[0], 16, 64)
			cur = byStart[start]
		}
	}
	if len(out) != len(p.Regions) {
		t.Fatalf("smaps of pid %d lacks some of %v", p.PID, p.Regions)
	}
	return out
}

// criuDump dumps the process into img with criu and waits until it is gone.
func (p *HugeProc) CRIUDump(t testing.TB, criu, img string) {
	t.Helper()
	Run(t, 5*time.Minute, nil, criu, "dump", "-t", strconv.Itoa(p.PID), "-D", img, "-o", filepath.Join(img, "dump.log"), "-v4")
	p.waitGone(t)
}

// CRIURestore restores img detached with criu (env added to its
// environment) and returns how long criu took and its log.
func CRIURestore(t testing.TB, criu, img string, env []string) (time.Duration, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "restore.log")
	start := time.Now()
	out, err := RunErr(5*time.Minute, env, criu, "restore", "-D", img, "-d", "-o", log, "-v4")
	d := time.Since(start)
	b, _ := os.ReadFile(log)
	if err != nil {
		t.Fatalf("%s restore: %v\n%s\n%s", criu, err, out, Tail(string(b), 30))
	}
	return d, string(b)
}

// kill ends the (restored) process and waits until it is reaped: a
// restore needs its pid free.
func (p *HugeProc) Kill(t testing.TB) {
	t.Helper()
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	p.waitGone(t)
}

func (p *HugeProc) waitGone(t testing.TB) {
	t.Helper()
	WaitFor(t, 2*time.Minute, "pid "+strconv.Itoa(p.PID)+" to be reaped", func() bool { return !procfs.Exists(p.PID) })
}

// LoggingCRIU is a `criu` in a directory of its own that records each
// command line, with the name of the process that ran it, and runs the
// patched CRIU: given as CRYO_CRIU, it shows which CRIU runc really ran.
type LoggingCRIU struct{ Path, Calls string }

func NewLoggingCRIU(t *testing.T) LoggingCRIU {
	t.Helper()
	dir := t.TempDir()
	c := LoggingCRIU{Path: filepath.Join(dir, "criu"), Calls: filepath.Join(dir, "calls")}
	script := "#!/bin/sh\necho \"$(cat /proc/$PPID/comm): $*\" >> " + c.Calls + "\nexec " + PatchedCRIU(t) + " \"$@\"\n"
	if err := os.WriteFile(c.Path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// runcSwrks counts the CRIU service sessions (dumps, restores, version
// queries) that runc started through it.
func (c LoggingCRIU) RuncSwrks() int {
	b, _ := os.ReadFile(c.Calls)
	return strings.Count(string(b), "runc: swrk")
}
