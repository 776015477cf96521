package criu

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
	"github.com/cryo-gpu/cryo/internal/procfs"
)

// The workload of the zero-page tests: MiB of touched zeros (with marked
// pages) and MiB of pseudo-random words, in a process and its child.
const (
	zeroMiB        = 256
	zeroWrittenMiB = 16
)

// zeroProc is testdata/zeropages.c running: a parent and a child.
type zeroProc struct {
	*harness.BareProc
	child    int
	nonzero  int64  // bytes of non-zero memory of both regions in both processes
	zeroAddr string // where the zero region starts, as in /proc/PID/smaps
}

func startZeroPages(t *testing.T) *zeroProc {
	t.Helper()
	harness.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "zeropages")
	harness.Run(t, time.Minute, nil, "gcc", "-O2", "-o", bin, filepath.Join("../testdata", "zeropages.c"))
	p := &zeroProc{BareProc: harness.StartBare(t, nil, nil, bin+" "+strconv.Itoa(zeroMiB)+" "+strconv.Itoa(zeroWrittenMiB)+" ready </dev/null")}
	harness.WaitFor(t, time.Minute, "zeropages to be ready", func() bool {
		b, _ := os.ReadFile(filepath.Join(p.Dir, "ready"))
		m := regexp.MustCompile(`nonzero_kib (\d+)`).FindSubmatch(b)
		if m == nil {
			return false
		}
		kib, _ := strconv.ParseInt(string(m[1]), 10, 64)
		p.nonzero = kib << 10
		if m := regexp.MustCompile(`child (\d+)`).FindSubmatch(b); m != nil {
			p.child, _ = strconv.Atoi(string(m[1]))
		}
		if m := regexp.MustCompile(`zero_addr ([0-9a-f]+)`).FindSubmatch(b); m != nil {
			p.zeroAddr = string(m[1])
		}
		return p.child > 0
	})
	return p
}

// verify has both processes check every byte of their memory (SIGUSR1 to
// the process group) and fails unless both say ok.
func (p *zeroProc) verify(t *testing.T, after string) {
	t.Helper()
	files := []string{filepath.Join(p.Dir, "result-parent"), filepath.Join(p.Dir, "result-child")}
	for _, f := range files {
		os.Remove(f)
	}
	harness.WaitFor(t, time.Minute, "both processes to check their memory after "+after, func() bool {
		_ = syscall.Kill(-p.PID, syscall.SIGUSR1) // again: a signal may come before pause()
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				return false
			}
		}
		return true
	})
	time.Sleep(100 * time.Millisecond) // the file is written whole; let the last write land
	for _, f := range files {
		if b, _ := os.ReadFile(f); string(b) != "ok\n" {
			t.Errorf("after %s, %s: %q", after, filepath.Base(f), b)
		}
	}
}

// end kills the restored tree and waits until its pids are free.
func (p *zeroProc) end(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	harness.WaitFor(t, time.Minute, "the restored tree to be reaped", func() bool { return !procfs.Exists(p.PID) && !procfs.Exists(p.child) })
}

// pagesBytes is the size of the pages-*.img files of a CRIU image directory.
func pagesBytes(t *testing.T, img string) int64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(img, "pages-*.img"))
	if len(files) == 0 {
		t.Fatalf("no pages-*.img in %s", img)
	}
	var n int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// zeroPagesSkipped sums the dump log's "cryo: N zero pages not dumped" lines.
func zeroPagesSkipped(t *testing.T, img string) (pages int64, lines int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(img, "criu-dump.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`cryo: (\d+) zero pages not dumped \(\d+ MiB\), scanned in \d+ ms`).FindAllSubmatch(b, -1) {
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		pages += n
		lines++
	}
	return pages, lines
}

func requireZeroPagesCRIU(t *testing.T) {
	t.Helper()
	criu := harness.PatchedCRIU(t)
	if out, err := harness.RunErr(time.Minute, nil, criu, "check", "--feature", "cryo_zero_pages"); err != nil {
		t.Fatalf("%s lacks cryo's zero-page patch (run `make deps`): %v\n%s", criu, err, out)
	}
}

// TestCRIUZeroPages: a process and its child, each with 256 MiB of touched
// zeros holding scattered non-zero pages (whole ones, and ones whose only
// non-zero byte is the first, a middle or the last one) and 16 MiB of
// random words, are checkpointed with `cryo checkpoint --pid`: the pages
// images hold about the non-zero memory only. Restored, both processes find
// every byte as it was: the child's zeroed copies of its parent's pages
// too (CRIU drops those from the memory it shares with the parent), after
// a restore by cryo's CRIU and after one by stock CRIU. The same
// checkpoint goes through `cryo image build`, a registry on loopback,
// `cryo image pull` and `cryo image restore`, and is checked again.
func TestCRIUZeroPages(t *testing.T) {
	requireZeroPagesCRIU(t)
	p := startZeroPages(t)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, nil, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WaitFor(t, time.Minute, "the dumped tree to exit", func() bool { return !procfs.Exists(p.PID) && !procfs.Exists(p.child) })

	size := pagesBytes(t, img)
	skipped, lines := zeroPagesSkipped(t, img)
	t.Logf("pages images %.1f MiB, non-zero memory %.1f MiB, %d zero pages not dumped (%d processes)",
		float64(size)/(1<<20), float64(p.nonzero)/(1<<20), skipped, lines)
	// The rest of the pages images is the processes' stacks, libc's data etc.
	if size > p.nonzero+16<<20 || size >= zeroMiB<<20/4 {
		t.Errorf("pages images hold %d bytes: want about the %d non-zero bytes", size, p.nonzero)
	}
	// After a window of 1024 pages with no zero page (the random words),
	// CRIU leaves the next windows of that mapping unscanned, so a few MiB
	// of zeros right after random data are dumped: most, not all, are left
	// out.
	if lines != 2 || skipped < 2*(zeroMiB<<20/4096)*95/100 {
		t.Errorf("dump log: %d zero pages not dumped in %d lines, want about %d in 2", skipped, lines, 2*(zeroMiB<<20/4096))
	}

	if pid := harness.BareRestoredPID(t, nil, img); pid != p.PID {
		t.Fatalf("restored pid %d, want %d", pid, p.PID)
	}
	p.verify(t, "cryo restore")
	p.wantAdviceKept(t, "cryo restore")
	p.end(t)

	// The image needs nothing new to restore: stock CRIU restores it too.
	if pid := harness.BareRestoredPID(t, []string{"CRYO_CRIU=" + harness.StockCRIU(t)}, img); pid != p.PID {
		t.Fatalf("restored by stock CRIU: pid %d, want %d", pid, p.PID)
	}
	p.verify(t, "a restore by stock CRIU")
	p.wantAdviceKept(t, "a restore by stock CRIU")
	p.end(t)

	reg := harness.StartRegistry(t)
	a, b := harness.NewNode(t, nil), harness.NewNode(t, nil)
	ref := reg.Addr + "/ckpt/zeropages:v1"
	a.Cryo(t, "image", "build", img, ref)
	a.Cryo(t, "image", "push", ref)
	b.Cryo(t, "image", "pull", ref)
	out := strings.TrimSpace(b.Cryo(t, "image", "restore", "--dir", filepath.Join(t.TempDir(), "work"), ref))
	if pid, _ := strconv.Atoi(out[strings.LastIndex(out, "\n")+1:]); pid != p.PID {
		t.Fatalf("image restore: pid %d, want %d:\n%s", pid, p.PID, out)
	}
	p.verify(t, "cryo image restore")
}

// TestCRIUZeroPagesOff: with CRYO_CRIU_ZERO_PAGES=0 in CRIU's environment
// the same processes' zero pages are dumped, as stock CRIU dumps them, and
// restored.
func TestCRIUZeroPagesOff(t *testing.T) {
	requireZeroPagesCRIU(t)
	p := startZeroPages(t)
	img := filepath.Join(t.TempDir(), "img")
	harness.BareCryo(t, []string{"CRYO_CRIU_ZERO_PAGES=0"}, "checkpoint", "--pid", strconv.Itoa(p.PID), "--dir", img)
	harness.WaitFor(t, time.Minute, "the dumped tree to exit", func() bool { return !procfs.Exists(p.PID) && !procfs.Exists(p.child) })

	size := pagesBytes(t, img)
	t.Logf("pages images %.1f MiB with CRYO_CRIU_ZERO_PAGES=0", float64(size)/(1<<20))
	// Both processes have every page of both regions present.
	if want := int64(2 * (zeroMiB + zeroWrittenMiB) << 20); size < want {
		t.Errorf("pages images hold %d bytes with CRYO_CRIU_ZERO_PAGES=0, want at least %d", size, want)
	}
	if skipped, lines := zeroPagesSkipped(t, img); lines != 0 {
		t.Errorf("dump log with CRYO_CRIU_ZERO_PAGES=0: %d zero pages not dumped in %d lines", skipped, lines)
	}
	b, _ := os.ReadFile(filepath.Join(img, "criu-dump.log"))
	harness.WantIn(t, string(b), "cryo: zero pages dumped (CRYO_CRIU_ZERO_PAGES=0)")

	if pid := harness.BareRestoredPID(t, nil, img); pid != p.PID {
		t.Fatalf("restored pid %d, want %d", pid, p.PID)
	}
	p.verify(t, "cryo restore")
}

// wantAdviceKept checks that the parent's zero region, which the process
// never advised, came back with no THP advice (smaps VmFlags neither "hg"
// nor "nh"): leaving its zero pages out must not change what the process
// asked of the kernel (zdtm's maps02 checks the same of its regions).
func (p *zeroProc) wantAdviceKept(t *testing.T, after string) {
	t.Helper()
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		return // no THP in this kernel: no advice to see
	}
	smaps, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	at, err := strconv.ParseUint(p.zeroAddr, 16, 64)
	if err != nil {
		t.Fatalf("zero region address %q: %v", p.zeroAddr, err)
	}
	var in bool
	for _, line := range strings.Split(string(smaps), "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasSuffix(f[0], ":") {
			if lo, hi, ok := strings.Cut(f[0], "-"); ok {
				l, _ := strconv.ParseUint(lo, 16, 64)
				h, _ := strconv.ParseUint(hi, 16, 64)
				in = l <= at && at < h
			}
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			if f := " " + line + " "; strings.Contains(f, " hg ") || strings.Contains(f, " nh ") {
				t.Errorf("after %s, the zero region at %s has %q: want no THP advice, as it was dumped", after, p.zeroAddr, line)
			}
			return
		}
	}
	t.Errorf("after %s, no region of pid %d holds the zero region's %s", after, p.PID, p.zeroAddr)
}
