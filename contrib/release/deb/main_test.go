package main

import "testing"

// Debian versions must sort as the commits do, and dpkg must accept them.
func TestDebVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v0.3.0":                  "0.3.0",
		"v0.3.0-rc1":              "0.3.0~rc1",
		"v0.3.0-5-gabc1234":       "0.3.0+git5.gabc1234",
		"v0.3.0-5-gabc1234-dirty": "0.3.0+git5.gabc1234.dirty",
		"v0.3.0-dirty":            "0.3.0+dirty",
		"59a6dc4":                 "0.0.0~git.59a6dc4",
		"abcdef0-dirty":           "0.0.0~git.abcdef0+dirty",
	} {
		if got := DebVersion(in); got != want {
			t.Errorf("DebVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
