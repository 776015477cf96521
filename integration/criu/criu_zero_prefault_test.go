package criu

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// The workload of TestCRIUZeroPrefault: MiB of written zeros (one page in
// 64 MiB not zero) and MiB of a reservation never touched.
const (
	prefaultZeroMiB    = 512
	prefaultReserveMiB = 1024
)

var zeroPrefaulted = regexp.MustCompile(`zero prefault: (\d+) MiB in (\d+) ranges on (\d+) threads, (\d+) ms`)

// TestCRIUZeroPrefault: after a restore by cryo's CRIU, every page of a
// region of written zeros is mapped (pagemap: present) and none of them
// takes memory (smaps Rss: the zero page), while a large reservation with
// one touched page has that page alone; every byte, the memory map and
// each region's VmFlags are as dumped. It holds with the fill threads and
// with the restorer alone. CRYO_CRIU_ZERO_PREFAULT=0 and stock CRIU,
// which ignores the list of zero runs in the image, map nothing there.
func TestCRIUZeroPrefault(t *testing.T) {
	harness.RequireRoot(t)
	requireZeroPagesCRIU(t)
	criu, stock := harness.PatchedCRIU(t), harness.StockCRIU(t)
	p := startZeroPrefault(t)
	data := &harness.HugeProc{BareProc: p.BareProc, Regions: map[string][2]uint64{"zeros": p.Regions["zeros"], "data": p.Regions["data"]}}
	sums, lines, flags := data.Sums(t), p.MapsLines(t), p.Smaps(t)
	img := t.TempDir()
	p.CRIUDump(t, criu, img)
	runs := filepath.Join(img, "cryo-zero-"+strconv.Itoa(p.PID)+".img")
	if st, err := os.Stat(runs); err != nil || st.Size() < 16+16 {
		t.Fatalf("the dump recorded no zero runs in %s: %v", runs, err)
	}

	zeroPages := int((p.Regions["zeros"][1] - p.Regions["zeros"][0]) / 4096)
	for i, c := range []struct {
		criu, opt string
		on        bool
	}{
		{criu, "", true},
		{criu, "CRYO_CRIU_FILL_THREADS=1", true},
		{criu, "CRYO_CRIU_ZERO_PREFAULT=0", false},
		{stock, "", false},
	} {
		what, env := c.criu+" with the defaults", []string(nil)
		if c.opt != "" {
			what, env = c.criu+" with "+c.opt, []string{c.opt}
		}
		if i > 0 {
			p.Kill(t)
		}
		d, log := harness.CRIURestore(t, c.criu, img, env)
		m := zeroPrefaulted.FindStringSubmatch(log)
		t.Logf("%s: restored in %v; %v", what, d.Round(time.Millisecond), m)
		// Structural first: reading the memory would map the zero page.
		zeroPresent, reservePresent := p.Present(t, "zeros"), p.Present(t, "reserve")
		t.Logf("%s: %d of %d zeros pages present, %d reserve pages", what, zeroPresent, zeroPages, reservePresent)
		switch {
		case c.on && m == nil:
			t.Fatalf("%s: no zero prefault in the restore log:\n%s", what, harness.Tail(log, 30))
		case c.on:
			if zeroPresent != zeroPages {
				t.Errorf("%s: %d of the %d pages of the zero region are mapped, want all", what, zeroPresent, zeroPages)
			}
			if mib, _ := strconv.Atoi(m[1]); mib < prefaultZeroMiB-1 || mib > prefaultZeroMiB {
				t.Errorf("%s: %q, want about %d MiB", what, m[0], prefaultZeroMiB)
			}
			if c.opt != "" && m[3] != "1" {
				t.Errorf("%s: %q, want the restorer alone", what, m[0])
			}
			if rss := p.RssKiB(t, "zeros"); rss > 64<<10 {
				t.Errorf("%s: the zero region takes %d kB after its prefault, want the dumped pages only", what, rss)
			}
		case m != nil:
			t.Errorf("%s: %q, want no prefault", what, m[0])
		case zeroPresent > zeroPages/16:
			t.Errorf("%s: %d of the %d pages of the zero region are mapped, want the dumped ones only", what, zeroPresent, zeroPages)
		}
		if reservePresent != 1 {
			t.Errorf("%s: %d pages of the untouched reservation are mapped, want its one touched page", what, reservePresent)
		}
		got := p.Smaps(t)
		for _, r := range []string{"zeros", "data", "reserve"} {
			if a, b := strings.Join(got[r].VmFlags, " "), strings.Join(flags[r].VmFlags, " "); a != b {
				t.Errorf("%s: region %s has VmFlags %q, was dumped with %q", what, r, a, b)
			}
		}
		data.WantSame(t, what, sums, lines)
		p.WantReserve(t, what)
	}
}

// startZeroPrefault builds testdata/zeroprefault.c and runs it.
func startZeroPrefault(t *testing.T) *harness.HugeProc {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "zeroprefault")
	harness.Run(t, time.Minute, nil, "gcc", "-O2", "-o", bin, filepath.Join("../testdata", "zeroprefault.c"))
	p := &harness.HugeProc{BareProc: harness.StartBare(t, nil, nil, bin+" "+strconv.Itoa(prefaultZeroMiB)+" "+strconv.Itoa(prefaultReserveMiB)+" regions </dev/null")}
	harness.WaitFor(t, 2*time.Minute, "zeroprefault's regions", func() bool {
		p.Regions = harness.ReadRegions(filepath.Join(p.Dir, "regions"))
		return len(p.Regions) == 3
	})
	return p
}
