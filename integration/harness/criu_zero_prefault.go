package harness

import (
	"bufio"
	"encoding/binary"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// present counts the pages of a region that are mapped (/proc/PID/pagemap
// bit 63), the zero page included.
func (p *HugeProc) Present(t *testing.T, region string) int {
	t.Helper()
	r := p.Regions[region]
	f, err := os.Open("/proc/" + strconv.Itoa(p.PID) + "/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, (r[1]-r[0])/4096*8)
	if _, err := io.ReadFull(io.NewSectionReader(f, int64(r[0]/4096*8), int64(len(buf))), buf); err != nil {
		t.Fatalf("pagemap of pid %d at %x: %v", p.PID, r[0], err)
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
func (p *HugeProc) RssKiB(t *testing.T, region string) int {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(p.PID) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := strconv.FormatUint(p.Regions[region][0], 16) + "-"
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
	t.Fatalf("smaps of pid %d has no region at %s", p.PID, start)
	return 0
}

// wantReserve: the reservation reads zero but for its one touched byte.
func (p *HugeProc) WantReserve(t *testing.T, what string) {
	t.Helper()
	r := p.Regions["reserve"]
	f, err := os.Open("/proc/" + strconv.Itoa(p.PID) + "/mem")
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
