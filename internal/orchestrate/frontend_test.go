package orchestrate

import "testing"

// Every keyed remedy has the CLI's words, which a front end without words
// for a key falls back on.
func TestRemedyWordsFallBack(t *testing.T) {
	o := New(testConfig, WithFrontEnd(FrontEnd{RemedyTCP: "ctr's words"}))
	for _, k := range RemedyKeys {
		want := cliWords[k]
		if k == RemedyTCP {
			want = "ctr's words"
		}
		if want == "" || o.remedy(k) != want {
			t.Errorf("%s: %q, want %q", k, o.remedy(k), want)
		}
	}
}
