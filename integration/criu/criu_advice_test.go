package criu

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// adviceRegions are the regions of testdata/advice.c.
var adviceRegions = []string{"dense", "partial", "huge", "nohuge", "seqlock"}

// TestCRIUAdviceKept: a process restored by cryo's CRIU has exactly the
// madvise advice it was dumped with (smaps VmFlags), every byte and the
// same memory map, in each of its regions: fully dumped with no advice,
// partly dumped with no advice, MADV_HUGEPAGE, MADV_NOHUGEPAGE, and
// MADV_SEQUENTIAL locked (zdtm's maps02 case). Where THP is in "madvise"
// mode and the kernel has UFFDIO_MOVE, the fully dumped ranges of the
// regions without advice are huge pages all the same. It holds for the
// fill threads (the default), the restorer alone (CRYO_CRIU_FILL_THREADS=1)
// and the stock fill (CRYO_CRIU_HUGE_FILL=0).
func TestCRIUAdviceKept(t *testing.T) {
	harness.RequireRoot(t)
	criu := harness.PatchedCRIU(t)
	p := startAdvice(t)
	sums, lines, flags := p.Sums(t), p.MapsLines(t), p.Smaps(t)
	for _, r := range adviceRegions {
		t.Logf("dumped %s: VmFlags %v, AnonHugePages %d kB", r, flags[r].VmFlags, flags[r].AnonHugeK)
	}
	if !flags["seqlock"].Has("lo") || !flags["seqlock"].Has("sr") || !flags["huge"].Has("hg") || !flags["nohuge"].Has("nh") {
		t.Fatalf("testdata/advice.c did not get its advice: %+v", flags)
	}
	img := t.TempDir()
	p.CRIUDump(t, criu, img)

	for i, opt := range []string{"", "CRYO_CRIU_FILL_THREADS=1", "CRYO_CRIU_HUGE_FILL=0"} {
		what, env := "restored with the defaults", []string(nil)
		if opt != "" {
			what, env = "restored with "+opt, []string{opt}
		}
		if i > 0 {
			p.Kill(t)
		}
		start := time.Now()
		_, log := harness.CRIURestore(t, criu, img, env)
		t.Logf("%s in %v: %s", what, time.Since(start).Round(time.Millisecond), hugeFillSummary(log))
		if !strings.Contains(log, hugeFillLog) {
			t.Fatalf("%s is stock CRIU, not cryo's patched build (contrib/criu): run `make deps`, or set CRYO_CRIU", criu)
		}
		p.WantSame(t, what, sums, lines)
		got := p.Smaps(t)
		for _, r := range adviceRegions {
			if a, b := strings.Join(got[r].VmFlags, " "), strings.Join(flags[r].VmFlags, " "); a != b {
				t.Errorf("%s: region %s has VmFlags %q, was dumped with %q", what, r, a, b)
			}
		}
		adviceCheckHuge(t, what, log, got, i == 2)
	}
}

// adviceCheckHuge: with the huge-page fill on, the fully dumped ranges of
// the regions without advice were moved in as huge pages; off, none was.
func adviceCheckHuge(t *testing.T, what, log string, got map[string]harness.SmapsEntry, off bool) {
	t.Helper()
	if got["nohuge"].AnonHugeK != 0 {
		t.Errorf("%s: the MADV_NOHUGEPAGE region has %d kB of huge pages", what, got["nohuge"].AnonHugeK)
	}
	switch {
	case off:
		harness.WantIn(t, log, hugeFillLog+"off (CRYO_CRIU_HUGE_FILL=0)")
		if harness.ThpMode() == "madvise" && got["dense"].AnonHugeK != 0 {
			t.Errorf("%s: the dense region has %d kB of huge pages", what, got["dense"].AnonHugeK)
		}
	case harness.ThpMode() != "madvise" || !strings.Contains(log, hugeFillLog+"on"):
		t.Logf("%s: the huge-page fill is off here (THP %s): %s", what, harness.ThpMode(), hugeFillSummary(log))
	default:
		m := hugeMoved.FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("%s: no huge-page move in the restore log:\n%s", what, harness.Tail(log, 30))
		}
		// 96 MiB dense and the first 32 MiB of partial: 2 MiB ranges
		// that can take a huge page, less the ones at unaligned ends.
		if mib, _ := strconv.Atoi(m[1]); mib < 96 {
			t.Errorf("%s: %q, want at least 96 MiB moved", what, m[0])
		}
		for _, r := range []string{"dense", "partial"} {
			if got[r].AnonHugeK == 0 {
				t.Errorf("%s: region %s has no huge pages: %+v", what, r, got[r])
			}
		}
	}
}

var hugeMoved = regexp.MustCompile(`huge-page fill: (\d+) MiB moved into place in \d+ ranges, (\d+) MiB copied`)

// hugeFillSummary is the restore log's huge-page and parallel fill lines.
func hugeFillSummary(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, hugeFillLog) || strings.Contains(l, "parallel fill: ") {
			if i := strings.Index(l, ") "); i > 0 {
				l = l[i+2:]
			}
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// startAdvice builds testdata/advice.c and runs it.
func startAdvice(t *testing.T) *harness.HugeProc {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "advice")
	harness.Run(t, time.Minute, nil, "gcc", "-O2", "-o", bin, filepath.Join("../testdata", "advice.c"))
	p := &harness.HugeProc{BareProc: harness.StartBare(t, nil, nil, bin+" regions </dev/null")}
	harness.WaitFor(t, 2*time.Minute, "advice's regions", func() bool {
		p.Regions = harness.ReadRegions(filepath.Join(p.Dir, "regions"))
		return len(p.Regions) == len(adviceRegions)
	})
	return p
}
