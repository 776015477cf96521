package orchestrate

import "testing"

// The core has no words of its own: a keyed remedy is the front end's,
// and a key the front end does not word leaves the failure's own remedy.
// That every front end words every key is checked beside each Wording
// (internal/words, internal/shim, internal/runcwrap).
func TestRemedyWordsAreTheFrontEnds(t *testing.T) {
	o := New(testConfig, WithFrontEnd(FrontEnd{RemedyTCP: "ctr's words"}))
	for _, k := range RemedyKeys {
		w, ok := o.remedy(k)
		if k == RemedyTCP && (!ok || w != "ctr's words") || k != RemedyTCP && ok {
			t.Errorf("%s: %q %v", k, w, ok)
		}
	}
	if got, want := o.dumpRemedy(nil), "read the CRIU log from its first error line, then retry"; got != want {
		t.Errorf("unworded refusal: %q, want %q", got, want)
	}
}
