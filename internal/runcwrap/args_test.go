package runcwrap

import (
	"reflect"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	c := parseCmdline([]string{"--root", "/r", "--cryo-env=/e", "--debug", "--log-format", "json", "--made-up", "checkpoint", "--image-path", "/img", "--leave-running", "ctr"})
	if c.command != "checkpoint" || c.envFile != "/e" {
		t.Fatalf("command %q env %q", c.command, c.envFile)
	}
	want := []string{"--root", "/r", "--debug", "--log-format", "json", "--made-up", "checkpoint", "--image-path", "/img", "--leave-running", "ctr"}
	if got := c.argv(); !reflect.DeepEqual(got, want) {
		t.Fatalf("argv %q, want %q", got, want)
	}
	if c.globalValue("log-format") != "json" || c.globalValue("root") != "/r" {
		t.Fatalf("globals %q", c.globals)
	}
}

func TestParseCROpts(t *testing.T) {
	o := parseCROpts([]string{"--work-path", "/w", "--image-path=/img", "-d", "--pid-file", "p", "--leave-running=false", "--brand-new", "ctr"})
	if o.id != "ctr" || o.imagePath != "/img" || o.workPath != "/w" || !o.detach || o.leaveRunning {
		t.Fatalf("%+v", o)
	}
	if o := parseCROpts([]string{"ctr"}); o.imagePath == "" || o.imagePath[0] != '/' {
		t.Fatalf("default image path %q", o.imagePath)
	}
}

func TestDeleteID(t *testing.T) {
	for _, c := range []struct {
		rest []string
		want string
	}{
		{[]string{"ctr"}, "ctr"},
		{[]string{"--force", "ctr"}, "ctr"},
		{[]string{"-f", "ctr"}, "ctr"},
		{[]string{"--help"}, ""},
		{[]string{"a", "b"}, ""},
		{nil, ""},
	} {
		if got := deleteID(c.rest); got != c.want {
			t.Errorf("deleteID(%q) = %q, want %q", c.rest, got, c.want)
		}
	}
}
