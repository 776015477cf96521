package integration

// cryo's CRIU maps the zero pages that its dump left out to the zero page
// at restore (contrib/criu/patches/0004, "zero prefault"), and only those:
// a region reserved and never touched stays unmapped.

import (
	"bufio"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
	requireRoot(t)
	requireZeroPagesCRIU(t)
	criu, stock := patchedCRIU(t), stockCRIU(t)
	p := startZeroPrefault(t)
	data := &hugeProc{bareProc: p.bareProc, regions: map[string][2]uint64{"zeros": p.regions["zeros"], "data": p.regions["data"]}}
	sums, lines, flags := data.sums(t), p.mapsLines(t), p.smaps(t)
	img := t.TempDir()
	p.criuDump(t, criu, img)
	runs := filepath.Join(img, "cryo-zero-"+strconv.Itoa(p.pid)+".img")
	if st, err := os.Stat(runs); err != nil || st.Size() < 16+16 {
		t.Fatalf("the dump recorded no zero runs in %s: %v", runs, err)
	}

	zeroPages := int((p.regions["zeros"][1] - p.regions["zeros"][0]) / 4096)
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
			p.kill(t)
		}
		d, log := criuRestore(t, c.criu, img, env)
		m := zeroPrefaulted.FindStringSubmatch(log)
		t.Logf("%s: restored in %v; %v", what, d.Round(time.Millisecond), m)
		// Structural first: reading the memory would map the zero page.
		zeroPresent, reservePresent := p.present(t, "zeros"), p.present(t, "reserve")
		t.Logf("%s: %d of %d zeros pages present, %d reserve pages", what, zeroPresent, zeroPages, reservePresent)
		switch {
		case c.on && m == nil:
			t.Fatalf("%s: no zero prefault in the restore log:\n%s", what, tail(log, 30))
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
			if rss := p.rssKiB(t, "zeros"); rss > 64<<10 {
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
		got := p.smaps(t)
		for _, r := range []string{"zeros", "data", "reserve"} {
			if a, b := strings.Join(got[r].vmFlags, " "), strings.Join(flags[r].vmFlags, " "); a != b {
				t.Errorf("%s: region %s has VmFlags %q, was dumped with %q", what, r, a, b)
			}
		}
		data.wantSame(t, what, sums, lines)
		p.wantReserve(t, what)
	}
}

// startZeroPrefault builds testdata/zeroprefault.c and runs it.
func startZeroPrefault(t *testing.T) *hugeProc {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "zeroprefault")
	run(t, time.Minute, nil, "gcc", "-O2", "-o", bin, filepath.Join("testdata", "zeroprefault.c"))
	p := &hugeProc{bareProc: startBare(t, nil, nil, bin+" "+strconv.Itoa(prefaultZeroMiB)+" "+strconv.Itoa(prefaultReserveMiB)+" regions </dev/null")}
	waitFor(t, 2*time.Minute, "zeroprefault's regions", func() bool {
		p.regions = readRegions(filepath.Join(p.dir, "regions"))
		return len(p.regions) == 3
	})
	return p
}

// present counts the pages of a region that are mapped (/proc/PID/pagemap
// bit 63), the zero page included.
func (p *hugeProc) present(t *testing.T, region string) int {
	t.Helper()
	r := p.regions[region]
	f, err := os.Open("/proc/" + strconv.Itoa(p.pid) + "/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, (r[1]-r[0])/4096*8)
	if _, err := io.ReadFull(io.NewSectionReader(f, int64(r[0]/4096*8), int64(len(buf))), buf); err != nil {
		t.Fatalf("pagemap of pid %d at %x: %v", p.pid, r[0], err)
	}
	n := 0
	for i := 0; i < len(buf); i += 8 {
		if binary.LittleEndian.Uint64(buf[i:])&(1<<63) != 0 {
			n++
		}
	}
	return n
}

// rssKiB is the smaps Rss of a region: the zero page is not counted.
func (p *hugeProc) rssKiB(t *testing.T, region string) int {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(p.pid) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := strconv.FormatUint(p.regions[region][0], 16) + "-"
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if f := strings.Fields(l); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			in = strings.HasPrefix(l, start)
		} else if in && strings.HasPrefix(l, "Rss:") && len(f) > 1 {
			kib, _ := strconv.Atoi(f[1])
			return kib
		}
	}
	t.Fatalf("smaps of pid %d has no region at %s", p.pid, start)
	return 0
}

// wantReserve: the reservation reads zero but for its one touched byte.
func (p *hugeProc) wantReserve(t *testing.T, what string) {
	t.Helper()
	r := p.regions["reserve"]
	f, err := os.Open("/proc/" + strconv.Itoa(p.pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	mid := (r[1] - r[0]) / 2
	for off := uint64(0); off < r[1]-r[0]; off += uint64(len(buf)) {
		if _, err := io.ReadFull(io.NewSectionReader(f, int64(r[0]+off), int64(len(buf))), buf); err != nil {
			t.Fatalf("%s: reading the reservation: %v", what, err)
		}
		for i, b := range buf {
			want := byte(0)
			if off+uint64(i) == mid {
				want = 1
			}
			if b != want {
				t.Fatalf("%s: the reservation has %d at +%#x, want %d", what, b, off+uint64(i), want)
			}
		}
	}
}
