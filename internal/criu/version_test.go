package criu

import (
	"errors"
	"strings"
	"testing"
)

func TestCRIUKernelRule(t *testing.T) {
	for _, c := range []struct {
		version int
		kernel  string
		want    string // "" for accepted
	}{
		{40201, "6.18.44-fc", ""},
		{40101, "6.12.1", ""},
		{40101, "6.16.0", "cannot checkpoint TCP or UDP sockets"},
		{31700, "6.13.2", "vDSO"},
		{31700, "6.1.0", ""},
	} {
		err := Info{Path: "/x/criu", Version: c.version, Kernel: c.kernel}.Check()
		if c.want == "" {
			if err != nil {
				t.Errorf("%d on %s: %v", c.version, c.kernel, err)
			}
			continue
		}
		if !errors.Is(err, ErrTooOld) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "make deps") {
			t.Errorf("%d on %s: %v, want %q", c.version, c.kernel, err, c.want)
		}
	}
	if s := (Info{Version: 40201}).VersionString(); s != "4.2.1" {
		t.Errorf("version string %s", s)
	}
}

func TestParseRelease(t *testing.T) {
	for out, want := range map[string]string{
		"Version: 4.2.1\nGitID: 7658cc6\n": "4.2.1",
		"Version: 4.1\n":                   "4.1",
		"no version here\n":                "",
	} {
		if got := parseRelease(out); got != want {
			t.Errorf("parseRelease(%q) = %q, want %q", out, got, want)
		}
	}
	i := Info{Version: 40300, Release: "4.2.1"}
	if got := i.VersionString(); got != "4.2.1" {
		t.Errorf("VersionString with a release: %q", got)
	}
	if got := (Info{Version: 40201}).VersionString(); got != "4.2.1" {
		t.Errorf("VersionString without a release: %q", got)
	}
}
