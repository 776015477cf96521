package harness

import (
	"testing"
)

// wantSame fails unless the process has the memory and number of memory
// regions it had before the dump.
func (p *HugeProc) WantSame(t *testing.T, what string, sums map[string]string, lines int) {
	t.Helper()
	for r, s := range p.Sums(t) {
		if s != sums[r] {
			t.Errorf("%s: the memory of region %s differs from the dumped one", what, r)
		}
	}
	if n := p.MapsLines(t); n != lines {
		t.Errorf("%s: %d lines in /proc/%d/maps, %d before the dump", what, n, p.PID, lines)
	}
}
