package orchestrate

import (
	"slices"
	"testing"

	"github.com/cryo-gpu/cryo/internal/criu"
	"github.com/cryo-gpu/cryo/internal/report"
)

// The core has no words of its own: a keyed remedy is the front end's,
// and a key the front end does not word leaves the failure's own remedy.
// That every front end words every key is checked beside each Wording
// (internal/words, internal/shim, internal/runcwrap).
func TestRemedyWordsAreTheFrontEnds(t *testing.T) {
	o := New(testConfig, WithFrontEnd(FrontEnd{criu.RefusedTCP: "ctr's words"}))
	for _, k := range RemedyKeys {
		w, ok := worded(o.FrontEnd, k)
		if k == criu.RefusedTCP && (!ok || w != "ctr's words") || k != criu.RefusedTCP && ok {
			t.Errorf("%s: %q %v", k, w, ok)
		}
	}
	if got, want := dumpRemedy(o.FrontEnd, nil), "read the CRIU log from its first error line, then retry"; got != want {
		t.Errorf("unworded refusal: %q, want %q", got, want)
	}
}

// Adding a remedy is one edit: RemedyKeys is every refusal criu reads
// from its log, each once, and the lock timeout; no second table maps a
// refusal to a key.
func TestRemedyKeysAreTheRefusals(t *testing.T) {
	want := append(criu.Refusals(), RemedyLockTimeout)
	if !slices.Equal(RemedyKeys, want) {
		t.Fatalf("RemedyKeys %v, want %v", RemedyKeys, want)
	}
	seen := map[report.Key]bool{}
	for _, k := range RemedyKeys {
		if seen[k] {
			t.Errorf("key %q twice", k)
		}
		seen[k] = true
	}
}
