package gpu

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/integration/harness"
)

// TestBenchCRIU: the restore of one image of a process with a filled
// private anonymous region of each size of $CRYO_BENCH_CRIU_MIB (default
// "1024 4096"), by stock CRIU and by cryo's patched CRIU (contrib/criu), and
// by the patched one with each of its two fills alone (huge pages:
// CRYO_CRIU_FILL_THREADS=1; threads: CRYO_CRIU_HUGE_FILL=0), side by side: the same
// image, the page cache warm, the order alternating over
// $CRYO_BENCH_CRIU_ROUNDS rounds (3). Rows as TestBenchGPU's, workload
// "anonmem". It runs only with CRYO_BENCH=1, on a GPU host or not.
func TestBenchCRIU(t *testing.T) {
	if os.Getenv("CRYO_BENCH") == "" {
		t.Skip("benchmarks run with `make bench` (CRYO_BENCH=1)")
	}
	b := &bench{t: t, path: os.Getenv("CRYO_BENCH_OUT")}
	sizes := os.Getenv("CRYO_BENCH_CRIU_MIB")
	if sizes == "" {
		sizes = "1024 4096"
	}
	kinds := []criuKind{
		{"stock", harness.StockCRIU(t), nil},
		{"patched", harness.PatchedCRIU(t), nil},
		{"patched, CRYO_CRIU_FILL_THREADS=1", harness.PatchedCRIU(t), []string{"CRYO_CRIU_FILL_THREADS=1"}},
		{"patched, CRYO_CRIU_HUGE_FILL=0", harness.PatchedCRIU(t), []string{"CRYO_CRIU_HUGE_FILL=0"}},
	}
	t.Logf("transparent huge pages: %s; stock %s, patched %s", harness.ThpMode(), kinds[0].criu, kinds[1].criu)
	warmHostMemory(t)
	for _, s := range strings.Fields(sizes) {
		mib, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("CRYO_BENCH_CRIU_MIB: %v", err)
		}
		b.criuRestore(mib, kinds, envInt("CRYO_BENCH_CRIU_ROUNDS", 3))
	}
}

type criuKind struct {
	name string
	criu string
	env  []string
}

func (b *bench) criuRestore(mib int, kinds []criuKind, rounds int) {
	t := b.t
	p := harness.StartHugefill(t, mib)
	lines := p.MapsLines(t)
	img := t.TempDir()
	p.CRIUDump(t, kinds[0].criu, img)
	b.row("anonmem", mib, "image bytes", float64(harness.DirBytes(t, img)))
	warmPageCache(t, img)
	for r := 0; r < rounds; r++ {
		for i := range kinds {
			k := kinds[(i+r)%len(kinds)] // each kind first in turn
			flushDirty(t)
			d, _ := harness.CRIURestore(t, k.criu, img, k.env)
			if n := p.MapsLines(t); n != lines {
				t.Fatalf("%s: %d memory regions after the restore, %d before the dump", k.name, n, lines)
			}
			b.row("anonmem", mib, "criu restore: "+k.name, d.Seconds())
			b.row("anonmem", mib, "AnonHugePages bytes: "+k.name, float64(p.Smaps(t)["filled"].AnonHugeK)*1024)
			p.Kill(t)
		}
	}
}

// warmPageCache reads every file of dir once, so that each restore reads
// the image from memory.
func warmPageCache(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
